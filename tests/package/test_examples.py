"""The example programs in examples/ use the package as its committed schema describes it: the Pulumi YAML program's
resource types, input properties and output references (checked path by path through the schema's types), the
TypeScript and Python programs' arguments and outputs, each program's Pulumi.yaml naming the plugin, and the spec
they share being valid."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from sandstack.spec import load_stack, load_text

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
    program["resources"]["agents"]["properties"]["specYAML"] = program["resources"]["agents"]["properties"].pop(
        "specYaml")
    program["resources"]["other"] = {"type": "sandstack:index:SandboxStacks"}
    program["outputs"] = {"a": "${agents.sandbox}", "b": "${agents.sandboxes[0].containers}",
                          "c": "${agents.hosts.local.address}", "d": "${agents.hosts[0]}"}
    assert yaml_program_problems(program) == [
        "agents: 'specYAML' is not an input of sandstack:index:SandboxStack",
        "other: type sandstack:index:SandboxStacks is not in the schema",
        "${agents.sandbox}: 'sandbox' is not one of ['hosts', 'runtime', 'sandboxes']",
        "${agents.sandboxes[0].containers}: 'containers' is not one of ['container', 'digest', 'egress', 'host', "
        "'image', 'name', 'network', 'pool', 'ports', 'template', 'version']",
        "${agents.hosts[0]}: [0] indexes object, not a list",
    ]


def test_the_yaml_program_reads_a_valid_spec():
    props = load_example("yaml")["resources"]["agents"]["properties"]
    folder = EXAMPLES / "yaml"
    text = (folder / props["specYaml"]["fn::readFile"]).read_text()
    assert load_text(text, folder / props["sourceDir"], "specYaml").hosts


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


def test_the_python_program_passes_inputs_and_reads_outputs_of_the_schema():
    tree = ast.parse((EXAMPLES / "python" / "__main__.py").read_text())
    [call] = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "sandstack.SandboxStack"]
    inputs = SCHEMA["resources"][TOKEN]["inputProperties"]
    assert [k.arg for k in call.keywords if camel(k.arg) not in inputs] == []
    read = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and ast.unparse(n.value) == "agents"}
    assert read == set(SCHEMA["resources"][TOKEN]["properties"])


def test_the_typescript_program_passes_inputs_and_reads_outputs_of_the_schema():
    source = (EXAMPLES / "typescript" / "index.ts").read_text()
    [args] = re.findall(r'new sandstack\.SandboxStack\("agents", \{(.*?)\}\);', source, re.S)
    keys = re.findall(r"^\s*([A-Za-z]+):", args, re.M)
    assert keys and [k for k in keys if k not in SCHEMA["resources"][TOKEN]["inputProperties"]] == []
    assert set(re.findall(r"agents\.([A-Za-z]+)", source)) == set(SCHEMA["resources"][TOKEN]["properties"])
    fields = set(re.findall(r"sandbox\.([A-Za-z]+)", source))
    assert fields and fields <= set(SCHEMA["types"]["sandstack:index:Sandbox"]["properties"])
    [spec_file] = re.findall(r'specFile: "([^"]+)"', args)
    assert (EXAMPLES / "typescript" / spec_file).resolve() == EXAMPLES / "sandboxes.yaml"


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
