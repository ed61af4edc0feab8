"""The example programs in examples/ use the package as its committed schema describes it: the Pulumi YAML program's
resource types, input properties and output references (checked path by path through the schema's types), the
TypeScript and Python programs' arguments and outputs, each program's typed spec checked value by value against the
schema's types (object types' properties, required ones, enums, maps, lists, unions) and equal to the shared spec
(examples/sandboxes.yaml), each program's Pulumi.yaml naming the plugin, and that spec being valid.

What stays unproven without the Pulumi CLI: that `pulumi package add` generates the SDKs these programs import from
the schema with these names (Python's `pulumi_sandstack.spec.StackArgs`, TypeScript's `@pulumi/sandstack`), that
the programs compile and run, and how each language's SDK types a union (a size as `number | string`)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from sandstack.package.spec_types import spec_types
from sandstack.spec import load_data, load_stack

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SCHEMA = json.loads((REPO / "package" / "schema.json").read_text())
TOKEN = "sandstack:index:SandboxStack"
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)\}")


def _type(ref: str) -> dict:
    return SCHEMA["types"][ref.removeprefix("#/types/")]


def output_problem(token: str, path: str) -> str | None:
    """Why `.a[0].b` does not name an output of `token` through the schema's types, or None."""
    node: dict = {"properties": SCHEMA["resources"][token]["properties"]}
    for step in re.findall(r"\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\]", path):
        if "$ref" in node:
            node = _type(node["$ref"])
        if step.startswith("["):
            if "items" not in node:
                return f"{step} indexes {node.get('type', 'an object')}, not a list"
            node = node["items"]
        elif "properties" in node:
            if step[1:] not in node["properties"]:
                return f"{step[1:]!r} is not one of {sorted(node['properties'])}"
            node = node["properties"][step[1:]]
        elif "additionalProperties" in node:
            node = node["additionalProperties"]  # a map: any key
        else:
            return f"{step[1:]!r} is a field of a {node.get('type')}"
    return None


def yaml_program_problems(program: dict) -> list[str]:
    problems = []
    resources = program.get("resources", {})
    ours = {name: r["type"] for name, r in resources.items() if r["type"].startswith("sandstack:")}
    for name, token in ours.items():
        if token not in SCHEMA["resources"]:
            problems.append(f"{name}: type {token} is not in the schema")
            continue
        given = set(resources[name].get("properties", {}))
        allowed = SCHEMA["resources"][token]["inputProperties"]
        problems += [f"{name}: {p!r} is not an input of {token}" for p in sorted(given - set(allowed))]
        problems += [f"{name}: required input {p!r} missing" for p in
                     SCHEMA["resources"][token]["requiredInputs"] if p not in given]
    for match in REFERENCE.finditer(json.dumps(program)):
        name, path = match.groups()
        if name in ours and ours[name] in SCHEMA["resources"]:
            problem = output_problem(ours[name], path)
            if problem:
                problems.append(f"${{{name}{path}}}: {problem}")
    return problems


def load_example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name / "Pulumi.yaml").read_text())


def test_the_yaml_program_uses_only_types_properties_and_outputs_of_the_schema():
    program = load_example("yaml")
    assert yaml_program_problems(program) == []
    assert {r["type"] for r in program["resources"].values()} == {TOKEN}
    assert len(REFERENCE.findall(json.dumps(program["outputs"]))) == 4


def test_the_yaml_check_catches_a_misspelt_type_input_or_output():
    program = load_example("yaml")
    program["resources"]["agents"]["properties"]["specs"] = program["resources"]["agents"]["properties"].pop("spec")
    program["resources"]["other"] = {"type": "sandstack:index:SandboxStacks"}
    program["outputs"] = {"a": "${agents.sandbox}", "b": "${agents.sandboxes[0].containers}",
                          "c": "${agents.hosts.local.address}", "d": "${agents.hosts[0]}"}
    assert yaml_program_problems(program) == [
        "agents: 'specs' is not an input of sandstack:index:SandboxStack",
        "other: type sandstack:index:SandboxStacks is not in the schema",
        "${agents.sandbox}: 'sandbox' is not one of ['hosts', 'runtime', 'sandboxes']",
        "${agents.sandboxes[0].containers}: 'containers' is not one of ['container', 'digest', 'egress', 'host', "
        "'image', 'name', 'network', 'pool', 'ports', 'template', 'version']",
        "${agents.hosts[0]}: [0] indexes object, not a list",
    ]


OPAQUE = object()  # an expression of the program's language (another resource's output, a variable)
SPEC_INPUT = SCHEMA["resources"][TOKEN]["inputProperties"]["spec"]


def typed_problems(value, prop: dict, where: str = "spec") -> list[str]:
    """Why a typed value does not fit a property of the schema, path by path (an expression fits anything: its
    type is the language's to check)."""
    if value is OPAQUE:
        return []
    if "oneOf" in prop:
        tried = [typed_problems(value, branch, where) for branch in prop["oneOf"]]
        return [] if [] in tried else [f"{where}: fits none of {[b.get('type') or b['$ref'] for b in prop['oneOf']]}"]
    if "$ref" in prop:
        typ = _type(prop["$ref"])
        if "enum" in typ:
            allowed = [v["value"] for v in typ["enum"]]
            return [] if value in allowed else [f"{where}: {value!r} is not one of {allowed}"]
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__} where an object belongs"]
        problems = [f"{where}: {k!r} is not a property of {prop['$ref'].rsplit(':', 1)[-1]}"
                    for k in value if k not in typ["properties"]]
        problems += [f"{where}: required {k!r} missing" for k in typ.get("required", []) if k not in value]
        for k, v in value.items():
            if k in typ["properties"]:
                problems += typed_problems(v, typ["properties"][k], f"{where}.{k}")
        return problems
    kind = prop["type"]
    if kind == "array":
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__} where a list belongs"]
        return [p for i, v in enumerate(value) for p in typed_problems(v, prop["items"], f"{where}[{i}]")]
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__} where a map belongs"]
        return [p for k, v in value.items() for p in typed_problems(v, prop["additionalProperties"], f"{where}.{k}")]
    fits = {"string": str, "integer": int, "number": (int, float), "boolean": bool}[kind]
    ok = isinstance(value, fits) and not (kind != "boolean" and isinstance(value, bool))
    return [] if ok else [f"{where}: {value!r} is not a {kind}"]


def shared_spec() -> dict:
    return spec_types().from_spec(yaml.safe_load((EXAMPLES / "sandboxes.yaml").read_text()))


def same_as_shared(value, shared) -> list[str]:
    """Where a program's typed spec differs from the shared spec's (an expression stands for any value)."""
    if value is OPAQUE:
        return []
    if isinstance(value, dict) and isinstance(shared, dict):
        return [f"{k}: {d}" for k in sorted(set(value) | set(shared))
                for d in same_as_shared(value.get(k, "<missing>"), shared.get(k, "<missing>"))]
    if isinstance(value, list) and isinstance(shared, list) and len(value) == len(shared):
        return [f"[{i}]: {d}" for i, (a, b) in enumerate(zip(value, shared)) for d in same_as_shared(a, b)]
    return [] if value == shared else [f"{value!r} != {shared!r}"]


def yaml_spec() -> dict:
    """The YAML program's typed spec, a `${...}` reference an expression."""
    def opaque(node):
        if isinstance(node, dict):
            return {k: opaque(v) for k, v in node.items()}
        if isinstance(node, list):
            return [opaque(v) for v in node]
        return OPAQUE if isinstance(node, str) and REFERENCE.fullmatch(node) else node
    return opaque(load_example("yaml")["resources"]["agents"]["properties"]["spec"])


def test_the_yaml_programs_spec_fits_the_schemas_types_and_is_the_shared_spec():
    assert typed_problems(yaml_spec(), SPEC_INPUT) == []
    assert same_as_shared(yaml_spec(), shared_spec()) == []
    assert yaml_spec()["templates"]["python"]["network"]["allow"] == [OPAQUE]  # `${allowedApi}`, from config
    assert load_example("yaml")["config"]["allowedApi"]["default"] == "api.example.com:443"


def test_the_typed_check_catches_a_misspelt_field_a_wrong_enum_a_missing_field_and_a_wrong_type():
    spec = shared_spec()
    spec["templates"]["python"]["base_image"] = spec["templates"]["python"].pop("baseImage")
    spec["templates"]["python"]["network"]["egress"] = "allow-some"
    del spec["pools"]["shell"]["template"]
    spec["hosts"]["local"]["capacity"]["memory"] = ["8GiB"]
    spec["templates"]["shell"]["limits"] = 7
    assert typed_problems(spec, SPEC_INPUT) == [
        "spec.hosts.local.capacity.memory: fits none of ['integer', 'string']",
        "spec.templates.shell.limits: fits none of ['string', '#/types/sandstack:spec:LimitsOverride']",
        "spec.templates.python: 'base_image' is not a property of Template",
        "spec.templates.python.network.egress: 'allow-some' is not one of ['deny-all', 'allow-list', 'allow-all']",
        "spec.pools.shell: required 'template' missing",
    ]


@pytest.mark.parametrize(("name", "runtime"), [("yaml", "yaml"), ("typescript", "nodejs"), ("python", "python")])
def test_each_example_is_a_pulumi_project_naming_the_plugin(name: str, runtime: str):
    project = load_example(name)
    assert (project["runtime"] if isinstance(project["runtime"], str) else project["runtime"]["name"]) == runtime
    plugin = (EXAMPLES / name / project["packages"]["sandstack"]).resolve()
    assert plugin == REPO / "package"
    assert yaml.safe_load((plugin / "PulumiPlugin.yaml").read_text())["runtime"]["name"] == "python"


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def python_value(node: ast.AST):
    """A Python example's argument as data: `spec.XArgs(a_b=…)` an object with Pulumi's names (its type's name
    under `$args`), literals as they are, any other expression opaque."""
    if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("spec."):
        return {"$args": ast.unparse(node.func).removeprefix("spec."),
                **{camel(k.arg): python_value(k.value) for k in node.keywords}}
    if isinstance(node, ast.Dict):
        return {ast.literal_eval(k): python_value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.List):
        return [python_value(v) for v in node.elts]
    if isinstance(node, ast.Constant):
        return node.value
    return OPAQUE


def without_args(value):
    if isinstance(value, dict):
        return {k: without_args(v) for k, v in value.items() if k != "$args"}
    if isinstance(value, list):
        return [without_args(v) for v in value]
    return value


def args_problems(value, prop: dict, where: str = "spec") -> list[str]:
    """Each `spec.XArgs` call names the type the schema has at its place."""
    if value is OPAQUE:
        return []
    problems = []
    if isinstance(value, dict) and "$args" in value:
        refs = [r for r in [prop.get("$ref")] + [b.get("$ref") for b in prop.get("oneOf", [])] if r]
        if f"#/types/sandstack:spec:{value['$args'].removesuffix('Args')}" not in refs:
            problems.append(f"{where}: {value['$args']} where {refs} belongs")
    objects = [b for b in [prop, *prop.get("oneOf", [])] if "$ref" in b and "properties" in _type(b["$ref"])]
    if objects and isinstance(value, dict):
        props = _type(objects[0]["$ref"])["properties"]
        problems += [p for k, v in value.items() if k in props for p in args_problems(v, props[k], f"{where}.{k}")]
    elif prop.get("type") == "object" and isinstance(value, dict):
        problems += [p for k, v in value.items() for p in args_problems(v, prop["additionalProperties"],
                                                                        f"{where}.{k}")]
    elif prop.get("type") == "array" and isinstance(value, list):
        problems += [p for i, v in enumerate(value) for p in args_problems(v, prop["items"], f"{where}[{i}]")]
    return problems


def python_program():
    tree = ast.parse((EXAMPLES / "python" / "__main__.py").read_text())
    [call] = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "sandstack.SandboxStack"]
    return tree, call


def test_the_python_program_passes_inputs_and_reads_outputs_of_the_schema():
    tree, call = python_program()
    inputs = SCHEMA["resources"][TOKEN]["inputProperties"]
    assert [k.arg for k in call.keywords if camel(k.arg) not in inputs] == []
    read = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and ast.unparse(n.value) == "agents"}
    assert read == set(SCHEMA["resources"][TOKEN]["properties"])


def python_spec():
    _, call = python_program()
    return python_value(next(k.value for k in call.keywords if k.arg == "spec"))


def test_the_python_programs_spec_fits_the_schemas_types_and_is_the_shared_spec():
    spec = python_spec()
    assert spec["$args"] == "StackArgs" and args_problems(spec, SPEC_INPUT) == []
    assert typed_problems(without_args(spec), SPEC_INPUT) == []
    assert same_as_shared(without_args(spec), shared_spec()) == []


def test_the_python_check_catches_an_args_class_of_another_type():
    spec = python_spec()
    spec["hosts"]["local"]["$args"] = "TemplateArgs"
    assert args_problems(spec, SPEC_INPUT) == [
        "spec.hosts.local: TemplateArgs where ['#/types/sandstack:spec:Host'] belongs"]


TS_TOKEN = re.compile(r"""\s*(?:(//[^\n]*)|([{}\[\],:])|("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
                      r"""|(-?\d+(?:\.\d+)?)(?![\w.])|([A-Za-z_$][\w$.]*(?:\([^()]*\))?))""")


def typescript_value(text: str):
    """A TypeScript object literal as data (keys, strings, numbers, booleans, lists, objects); any other expression
    (a variable, another resource's output) opaque. Enough for the example's literal; not a TypeScript parser."""
    tokens = [next(g for g in m.groups()[1:] if g is not None) for m in TS_TOKEN.finditer(text)
              if m.group(1) is None and any(m.groups()[1:])]
    position = 0

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def value():
        token = take()
        if token in "{[":
            close, out = ("}", {}) if token == "{" else ("]", [])
            while tokens[position] != close:
                if token == "{":
                    key = take()
                    key = key[1:-1] if key[0] in "\"'" else key
                    assert take() == ":", f"':' expected after {key!r}"
                    out[key] = value()
                else:
                    out.append(value())
                if tokens[position] == ",":
                    take()
            take()
            return out
        if token[0] in "\"'":
            return token[1:-1]
        if re.fullmatch(r"-?\d+(\.\d+)?", token):
            return json.loads(token)
        return {"true": True, "false": False}.get(token, OPAQUE)

    return value()


def typescript_args() -> dict:
    source = (EXAMPLES / "typescript" / "index.ts").read_text()
    [args] = re.findall(r'new sandstack\.SandboxStack\("agents", (\{.*?\n\})\);', source, re.S)
    return typescript_value(args)


def test_the_typescript_program_passes_inputs_and_reads_outputs_of_the_schema():
    source = (EXAMPLES / "typescript" / "index.ts").read_text()
    args = typescript_args()
    assert args and [k for k in args if k not in SCHEMA["resources"][TOKEN]["inputProperties"]] == []
    assert set(re.findall(r"agents\.([A-Za-z]+)", source)) == set(SCHEMA["resources"][TOKEN]["properties"])
    fields = set(re.findall(r"sandbox\.([A-Za-z]+)", source))
    assert fields and fields <= set(SCHEMA["types"]["sandstack:index:Sandbox"]["properties"])


def test_the_typescript_programs_spec_fits_the_schemas_types_and_takes_another_resources_output():
    spec = typescript_args()["spec"]
    assert typed_problems(spec, SPEC_INPUT) == []
    assert same_as_shared(spec, shared_spec()) == []
    assert spec["templates"]["python"]["baseImage"] is OPAQUE  # `python.repoDigest`, a RemoteImage's output


def test_the_typescript_reader_reads_a_literal_and_the_check_catches_a_misspelt_field():
    assert typescript_value("{ a: \"x\", 'b': [1, 2.5, true], c: img.repoDigest, d: { e: f(1) }, }") == {
        "a": "x", "b": [1, 2.5, True], "c": OPAQUE, "d": {"e": OPAQUE}}
    spec = typescript_args()["spec"]
    spec["pools"]["shell"]["replica"] = spec["pools"]["shell"].pop("replicas")
    assert typed_problems(spec, SPEC_INPUT) == ["spec.pools.shell: 'replica' is not a property of Pool"]


def test_the_shared_spec_is_valid():
    assert load_stack(EXAMPLES / "sandboxes.yaml").pools


def readme_section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## From any Pulumi language")
    return text[start:text.index("\n## ", start + 1)]


def test_the_readme_package_add_command_names_the_plugin_folder_from_the_example():
    [(folder, source)] = re.findall(r"^cd (\S+) && pulumi package add (\S+)", readme_section(), re.M)
    assert (REPO / folder / source / "PulumiPlugin.yaml").is_file()
    assert (REPO / folder / "Pulumi.yaml").is_file()
    assert re.search(r"^pulumi package add \S+\.git/package@v", readme_section(), re.M)


def test_the_readme_yaml_snippet_uses_the_schema():
    [snippet] = re.findall(r"```yaml\n(.*?)```", readme_section(), re.S)
    program = yaml.safe_load(snippet)
    assert yaml_program_problems(program) == []
    assert program["resources"]["agents"]["type"] == TOKEN


def test_the_readme_yaml_snippets_spec_fits_the_schemas_types_and_is_a_valid_spec():
    [snippet] = re.findall(r"```yaml\n(.*?)```", readme_section(), re.S)
    spec = yaml.safe_load(snippet)["resources"]["agents"]["properties"]["spec"]
    assert typed_problems(spec, SPEC_INPUT) == []
    assert load_data(spec_types().to_spec(spec), REPO).pools
