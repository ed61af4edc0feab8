"""`sandstack check`: whether a valid stack is acceptable. Built-in rules (`builtin`, with the container-level
rules in `containers`, which the CrossGuard pack shares), organisation rules as cerberus data (`org`), secret
scanning with detect-secrets (`credentials`), suppressions and the report formats (`report`, `sarif`).
Rules read the resolved spec and the plan; none interprets the spec a second time.
"""
