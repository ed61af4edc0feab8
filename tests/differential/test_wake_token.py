"""The ingress's wake token as `pulumi up` registers it (docs/design/ondemand.md, "Waking on a URL request"): the
runtime and the ingress get the same value, derived from the host's runtime token, as a Pulumi secret; the Caddyfile
in the ingress's environment names only the variable; and no review output (preview, diff, every format) holds the
token or the value derived from it."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from sandstack.plan.ingress import wake_token_label
from sandstack.plan.runtime import ENV_WAKE_TOKEN
from sandstack.plan.stack import plan_stack
from sandstack.plan.tree import Secret
from sandstack.spec import load_stack
from sandstack.tooling.cli import main
from testbed.provider.mocks import RecordingMocks, run_program
from testbed.specs import host, spec, stack_program, write_spec
from tests.differential.compare import compare

TOKEN = "host-runtime-token-for-the-wake-test-7c1f"
TENANT = "tenant-runtime-token-for-the-wake-test-9ab2"
WEB = {"base_image": "busybox:1.36", "command": ["sleep", "infinity"], "limits": {"memory": "128MiB"},
       "network": {"egress": "deny-all"}, "ports": [{"port": 8080, "exposure": "url", "name": "app"}]}
RUNTIME = {"token": {"secret": "runtimeToken"}, "tokens": {"web": {"secret": "webToken", "pools": ["web"]}}}
SECRETS = {"runtimeToken": TOKEN, "webToken": TENANT}


def _data(ingress: dict | None = None) -> dict:
    return spec({"web": WEB}, {"web": {"template": "web", "hosts": ["local"], "replicas": 1, "max": 2}},
                hosts={"local": host(runtime=RUNTIME, ingress=ingress or {"domain": "sbx.example.com"})})


def _envs(mocks: RecordingMocks, role: str, part: str = "container") -> dict[str, str]:
    reg = mocks.by_name(f"sandstack-local-{role}-{part}")
    if part == "container":
        assert "envs" in reg.secret_paths, f"the {role}'s environment is not a secret"
    return dict(item.split("=", 1) for item in reg.inputs["envs"])


def test_the_runtime_and_the_ingress_get_the_same_derived_token_as_a_secret(tmp_path: Path):
    path = write_spec(tmp_path, _data())
    mocks = RecordingMocks()
    run_program(stack_program(path, "t", tmp_path / "build"), mocks, stack="t", secret_config=SECRETS)
    runtime, ingress = _envs(mocks, "runtime"), _envs(mocks, "ingress")
    expected = hmac.new(TOKEN.encode(), b"sandstack ingress-wake t/local", hashlib.sha256).hexdigest()
    assert runtime[ENV_WAKE_TOKEN] == ingress[ENV_WAKE_TOKEN] == expected
    assert expected not in (TOKEN, TENANT)
    # The Caddyfile (which the policy pack reads) names the variable and holds no token.
    caddyfile = _envs(mocks, "ingress", "reload")["SANDSTACK_CADDYFILE"]  # its configuration
    assert f"{{env.{ENV_WAKE_TOKEN}}}" in caddyfile
    assert not any(value in caddyfile for value in (TOKEN, TENANT, expected))
    # And the ingress holds no other token of the runtime's.
    assert not any(value in "\n".join(ingress.values()).replace(expected, "") for value in (TOKEN, TENANT))
    # What is registered is exactly the plan (the derived secret included).
    assert compare(plan_stack(load_stack(path), "t", build_root=tmp_path / "build"), mocks, SECRETS) == []


def test_no_review_output_holds_the_token_or_the_wake_token(tmp_path: Path, capsys):
    head = write_spec(tmp_path / "head", _data())
    base = write_spec(tmp_path / "base", {**_data(), "hosts": {"local": host(runtime=RUNTIME)},
                                          "templates": {"web": {**WEB, "ports": []}}})
    # The CLI names the stack after the file: the value `pulumi up` would derive under that name, and under 't'.
    derived = [Secret("runtimeToken", derive=wake_token_label(stack, "local")).render(TOKEN) for stack in ("stack", "t")]
    shown = []
    for argv in (["preview", str(head)], ["diff", str(base), str(head)]):
        for fmt in ("text", "json", "markdown"):
            assert main([*argv, "--format", fmt]) == 0
            out = capsys.readouterr()
            text = out.out + out.err
            assert not any(value in text for value in (TOKEN, TENANT, *derived)), f"{argv[0]} --format {fmt}"
            shown.append(text)
    # What a reviewer sees instead: where the ingress reaches the runtime, and the token's config key.
    wake = plan_stack(load_stack(head), "stack").hosts["local"].ingress.wake
    # (The preview shows it; the diff shows the ingress created, and in json its derived token's key.)
    assert [wake.upstream in text for text in shown[:3]] == [True] * 3
    flowed = " ".join(shown[0].replace("│", " ").split())  # the text wraps long lines under the tree
    assert (f"a URL of a stopped sandbox wakes its session through the runtime at {wake.upstream} "
            "(token derived from secret runtimeToken)") in flowed
    assert '"derived": "ingress-wake"' in shown[1]
