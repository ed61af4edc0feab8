"""The plan layer: pure values from the resolved spec to everything the components register.

Names (`naming`), networks and firewall rules (`network`), the gateway's squid.conf (`squid`), the
snapshot build context (`snapshot`), each sandbox container's inputs (`sandbox`), the host guard's and
gateway's container inputs (`host`), the host/sandbox contract constants (`contract`), the package
files they read (`package_files`) and what a change does (`changes`). Nothing here imports Pulumi or
pulumi-docker: a plan is computed and tested in milliseconds, and previews and diffs read the same plan
the components register.
"""
