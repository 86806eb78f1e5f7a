"""Pricing grown trees: step costs, selection and the latency sources they join (numpy); imports
the model, the documents, the engines' forms and the roofline."""
