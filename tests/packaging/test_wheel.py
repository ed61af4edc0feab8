"""sandstack as a plugin: the wheel and sdist hold everything the components read at run time, and a
Pulumi program outside the checkout gets sandboxes from the installed wheel alone.

The build runs on a copy of the checkout's files that git tracks or would add (nothing ignored, nothing written
into the checkout) with the installed setuptools (no network). The fresh virtualenv finds the dependencies
(pulumi, pydantic, ...) through a `.pth` line naming this venv's site-packages (a bare path: this venv's
editable-install hook does not run there), and gets sandstack only from the wheel; the program checks where it
imported it from.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNTIME_FILES = (
    "sandstack/components/assets/guard.sh",
    "sandstack/components/assets/supervise.sh",
    "sandstack/components/assets/infra/Dockerfile",
    "sandstack/schemas/stack.schema.json",
)

# Three specs in one program, each its own SandboxStack, under Pulumi's mocks: two files and one object.
PROGRAM = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    import pulumi

    class Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args):
            return args.name + "-id", {**args.inputs, "name": args.inputs.get("name", args.name),
                                       "imageId": "sha256:" + "0" * 64, "repoDigest": "",
                                       "ports": args.inputs.get("ports", [])}
        def call(self, args):
            return {}

    pulumi.runtime.set_mocks(Mocks(), project="external", stack="dev", preview=False)

    import sandstack
    from sandstack.components import SandboxStack
    from sandstack.program import build_stack
    from sandstack.spec import SpecError, load_data

    spec = """
    version: 1
    hosts:
      local:
        endpoint: unix:///var/run/docker.sock
        capacity: {cpus: 8, memory: 16GiB, disk: 100GiB}
    templates:
      agent:
        base_image: busybox:1.36
    pools:
      agent: {template: agent, hosts: [local], replicas: 2}
    """
    Path("one.yaml").write_text(spec)
    Path("two.yaml").write_text(spec.replace("replicas: 2", "replicas: 1"))
    # The same spec as an object, built in code: validated like the files, errors located by JSON path.
    three = {"version": 1,
             "hosts": {"local": {"endpoint": "unix:///var/run/docker.sock",
                                 "capacity": {"cpus": 8, "memory": "16GiB", "disk": "100GiB"}}},
             "templates": {"agent": {"base_image": "busybox:1.36"}},
             "pools": {"agent": {"template": "agent", "hosts": ["local"], "replicas": 1}}}
    try:
        load_data({**three, "pools": {"agent": {"template": "agent", "hosts": ["local"], "replicas": -1}}}, ".")
    except SpecError as error:
        refused = str(error)

    @pulumi.runtime.test  # runs the program's event loop until the outputs below are known
    def program():
        one = build_stack("one.yaml", name="one", stack="one")
        two = build_stack("two.yaml", name="two", stack="two")
        from_object = build_stack(three, name="three", stack="three", source_dir=".")
        assert isinstance(one, SandboxStack)

        def report(values):
            print(json.dumps({"module": sandstack.__file__, "one": [s["name"] for s in values[0]],
                              "two": [s["container"] for s in values[1]],
                              "three": [s["container"] for s in values[2]], "refused": refused}), flush=True)

        return pulumi.Output.all(one.sandboxes, two.sandboxes, from_object.sandboxes).apply(report)

    program()
''')


def test_the_wheel_holds_one_package_with_its_runtime_files(dist):
    [wheel] = dist.glob("sandstack-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"sandstack", next(t for t in top if t.endswith(".dist-info"))}, top
    assert set(RUNTIME_FILES) <= set(names), set(RUNTIME_FILES) - set(names)
    assert "sandstack/components/sandbox_stack.py" in names and "sandstack/program.py" in names
    assert "sandstack/package/provider.py" in names  # the Pulumi package's provider (package/ is not in the wheel)
    # Every module of the package: a subpackage missing from pyproject's list is left out of the wheel silently
    # (sandstack/runtime/routes was: `sandstack check` from the wheel failed planning the runtime's code archive).
    sources = {f"sandstack/{p.relative_to(REPO / 'sandstack').as_posix()}" for p in (REPO / "sandstack").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert sources <= set(names), sorted(sources - set(names))


def test_the_installed_wheel_serves_the_committed_package_schema(wheel_venv, tmp_path):
    # What the plugin's virtualenv gets (package/requirements.txt installs this repository): the provider infers
    # the same schema, descriptions included (Pulumi reads them from the installed sources).
    python = wheel_venv / "bin" / "python"
    run = subprocess.run([str(python), "-c", "from sandstack.package.provider import render_schema; "
                          "print(render_schema(), end='')"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == (REPO / "package" / "schema.json").read_text()


def test_the_sdist_holds_the_sources_and_runtime_files(dist):
    [sdist] = dist.glob("sandstack-*.tar.gz")
    names = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    for path in ("components/assets/guard.sh", "components/assets/supervise.sh",
                 "components/assets/infra/Dockerfile", "schemas/stack.schema.json", "pyproject.toml"):
        assert path in names, path


def test_an_external_program_gets_sandboxes_from_the_installed_wheel_alone(wheel_venv, tmp_path):
    venv = wheel_venv
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "program.py").write_text(PROGRAM)
    run = subprocess.run([str(python), "program.py"], cwd=work, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["module"].startswith(str(site)), report["module"]
    assert report["one"] == ["local/agent/0", "local/agent/1"]
    assert report["two"] == ["sandstack-two-agent-0"]
    assert report["three"] == ["sandstack-three-agent-0"]
    assert report["refused"].startswith("<object>: $.pools.agent.replicas: "), report["refused"]
    version = subprocess.run([str(venv / "bin" / "sandstack"), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == "sandstack 0.2.0", version


def test_declared_dependencies_are_the_ones_the_package_imports():
    import ast
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {d.split(">")[0].split("<")[0].split("=")[0].strip().replace("-", "_").lower() for d in requirements}

    def imports(paths) -> set[str]:
        imported = set()
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    imported |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imported.add(node.module.split(".")[0])
        third_party = {m for m in imported if m not in sys.stdlib_module_names and m != "sandstack"}
        # Import names that differ from the distribution's name.
        return {{"yaml": "pyyaml"}.get(m, m) for m in third_party}

    # The runtime service runs in the infra image with the `runtime` extra, and so do the host services' programs
    # (components/assets: the connection logger, a reload container joining networks through the Docker SDK);
    # everything else needs only the core.
    service = sorted((REPO / "sandstack" / "runtime").rglob("*.py")) + sorted((REPO / "components" / "assets").rglob("*.py"))
    core = [p for folder in ("sandstack", "components") for p in (REPO / folder).rglob("*.py") if p not in service]
    assert imports(core) == names(project["dependencies"]), (imports(core), names(project["dependencies"]))
    assert imports(service) - names(project["dependencies"]) == names(project["optional-dependencies"]["runtime"])
