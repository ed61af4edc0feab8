"""sandstack's CrossGuard pack: `pulumi preview --policy-pack policies/crossguard`.

It enforces the container-level subset of `sandstack check`'s built-in rules on every
docker:index/container:Container of the program (the rule logic is sandstack.policy.containers, shared with
`sandstack check`), so sandboxes made outside sandstack's components are held to the same rules. sandstack's own
host containers are exempt by their place in its component tree (the URN's parent types), never by a label; a url
port its public ingress serves is public, as in `sandstack check`; the sandboxes the runtime creates on demand are
judged from the recipes in its configuration, place by place. Configure it with `--policy-pack-config`
(capabilities, publicPorts, writableRoot, untrusted, maxGpus, sudo). Its environment: requirements.txt.
"""

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, PolicyPack, ResourceValidationPolicy

from sandstack.policy.builtin import RULES
from sandstack.policy.crossguard import CONFIG_SCHEMA, CONTAINER_RULES, validator

PolicyPack(
    name="sandstack",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=[
        ResourceValidationPolicy(
            name=RULES[rule].name,
            description=f"{rule}: {RULES[rule].description}",
            validate=validator(rule),
            enforcement_level=(EnforcementLevel.MANDATORY if RULES[rule].severity == "error"
                               else EnforcementLevel.ADVISORY),
            config_schema=PolicyConfigSchema(properties=CONFIG_SCHEMA),
        )
        for rule in CONTAINER_RULES
    ],
)
