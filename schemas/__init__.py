"""`sandstack.schemas`: the JSON Schema of a stack spec, generated from the models (`sandstack generate`).

Read it with `importlib.resources.files("sandstack.schemas") / "stack.schema.json"`.
"""
