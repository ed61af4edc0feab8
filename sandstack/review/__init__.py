"""What reviewers and CI read: the resources a spec makes (`resources`), shown as a tree (`preview`),
compared between two specs (`diff`, with the security summary of `security`), read from files or git
(`sources`). Everything is computed from the plan layer the components register, offline: no Pulumi CLI,
no Docker, no credentials.
"""
