"""The engines' rules and forms: what each engine accepts of a tree and the text it reads
(numpy); imports the model, the documents and the drafter registry."""
