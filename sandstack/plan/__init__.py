"""The plan layer: pure values from the resolved spec to everything the components register.

Names (`naming`), networks and firewall rules (`network`), the gateway's squid.conf (`squid`), the
snapshot build context (`snapshot`), each sandbox container's inputs (`sandbox`), its secrets seeder
(`secrets`), data volumes (`data`) and disk workspaces (`workspace`), each host role's container (`guard`,
`gateway`, `logger` with the logging resolvers of `resolver`, `ingress`, `runtime_host`; their shared run
settings in `container`) and the host as a whole (`host`), the host/sandbox contract constants (`contract`),
the package files they read (`package_files`), what a change does (`changes`) and the components' Pulumi type
tokens (`types`). Nothing here imports Pulumi or pulumi-docker: a plan is computed and tested in milliseconds,
and previews and diffs read the same plan the components register.
"""
