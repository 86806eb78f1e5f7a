"""Put a benchmark's table into a doc between its markers, ``<!-- NAME -->`` and
``<!-- /NAME -->``: what a benchmark's ``--write docs/<doc>.md`` does.

>>> replace_between("intro\\n<!-- t -->\\nold\\n<!-- /t -->\\nrest\\n", "t", "new")
'intro\\n<!-- t -->\\nnew\\n<!-- /t -->\\nrest\\n'
"""

from __future__ import annotations

from pathlib import Path


def markers(name: str) -> tuple[str, str]:
    """The opening and closing marker of the table called ``name``."""
    return f"<!-- {name} -->", f"<!-- /{name} -->"


def replace_between(body: str, name: str, text: str) -> str:
    """``body`` with everything between the two markers replaced by ``text``; a missing closing
    marker is added after it. Raises ``ValueError`` when the opening marker is missing."""
    begin, end = markers(name)
    if begin not in body:
        raise ValueError(f"no {begin} marker")
    before, _, rest = body.partition(begin)
    after = rest.partition(end)[2] if end in rest else rest
    return f"{before}{begin}\n{text}\n{end}{after}"


def write_between(doc: str | Path, name: str, text: str) -> None:
    """Rewrite the file ``doc`` with ``text`` between the markers of ``name``. Raises
    ``ValueError`` naming the file when the opening marker is missing."""
    path = Path(doc)
    try:
        path.write_text(replace_between(path.read_text(), name, text))
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
