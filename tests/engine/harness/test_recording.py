"""The harness without a daemon: recording mocks, field tables, translation and state decisions."""

from __future__ import annotations

import asyncio
import inspect

import pulumi
import pulumi_docker as docker
import pytest

from testbed.provider import container_fields, container_map
from testbed.harness.harness import Harness
from testbed.provider.schema import MiB, go_duration_ns
from testbed.provider.tables import MAPPINGS
from testbed.provider.mocks import (DuplicateUrnError, InputValueError, RecordingMocks,
                                           UnmappedFieldError, UnsupportedResourceError, run_program)

CONTAINER = "docker:index/container:Container"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _args(cls) -> set[str]:
    return {_camel(p) for p in inspect.signature(cls.__init__).parameters if p not in ("self", "__self__")}


@pytest.mark.parametrize("args_class, token, not_mapped", [
    (docker.ContainerArgs, CONTAINER, set()),
    (docker.NetworkArgs, "docker:index/network:Network", set()),
    (docker.VolumeArgs, "docker:index/volume:Volume", {"cluster"}),           # swarm cluster volumes
    (docker.RemoteImageArgs, "docker:index/remoteImage:RemoteImage", set()),
    (docker.RegistryImageArgs, "docker:index/registryImage:RegistryImage", set()),
])
def test_tables_map_every_input_of_the_installed_sdk(args_class, token, not_mapped):
    # Guards upgrades of pulumi-docker: a new input must be mapped (or deliberately listed here).
    assert _args(args_class) - set(MAPPINGS[token].by_name) == not_mapped


@pytest.mark.parametrize("args_class, sub", [
    (docker.ContainerUploadArgs, container_fields.UPLOAD_SUB), (docker.ContainerMountArgs, container_fields.MOUNT_SUB),
    (docker.ContainerNetworksAdvancedArgs, container_fields.NETWORK_SUB), (docker.ContainerPortArgs, container_fields.PORT_SUB),
    (docker.ContainerHealthcheckArgs, container_map.HEALTHCHECK_SUB),
])
def test_nested_tables_map_every_field_of_the_installed_sdk(args_class, sub):
    assert _args(args_class) == set(sub)


def _container(**kwargs):
    def program():
        docker.Container("c", image="img", **kwargs)
    mocks = RecordingMocks()
    run_program(program, mocks)
    return mocks.by_name("c")


def test_units_are_translated_like_the_provider():
    reg = _container(memory=64, memory_swap=-1, memory_reservation=32, shm_size=16, cpus="1.5", cpu_shares=512)
    host = reg.plan.host
    assert (host["Memory"], host["MemorySwap"], host["MemoryReservation"]) == (64 * MiB, -1, 32 * MiB)
    assert (host["ShmSize"], host["NanoCpus"], host["CpuShares"]) == (16 * MiB, 1_500_000_000, 512)


def test_cpus_too_precise_is_refused_naming_field_and_urn():
    with pytest.raises(InputValueError, match=r"Container urn:pulumi:test::sandstack::.*::c: input 'cpus'.*too precise"):
        _container(cpus="0.0000000001")


def test_ports_default_to_all_addresses_tcp_and_a_random_host_port():
    reg = _container(ports=[docker.ContainerPortArgs(internal=80), docker.ContainerPortArgs(internal=53, protocol="udp",
                                                                                            external=5353, ip="127.0.0.1")])
    assert reg.plan.config["ExposedPorts"] == {"80/tcp": {}, "53/udp": {}}
    assert reg.plan.host["PortBindings"] == {"80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "0"}],
                                             "53/udp": [{"HostIp": "127.0.0.1", "HostPort": "5353"}]}


def test_gpus_follow_the_docker_cli_syntax():
    assert _container(gpus="all").plan.host["DeviceRequests"] == [
        {"Driver": "", "Count": -1, "Options": {}, "Capabilities": [["gpu"]]}]
    assert _container(gpus="device=1").plan.host["DeviceRequests"][0]["DeviceIDs"] == ["1"]
    # Provider quirk: normalizeGPUOptionString strips the quotes docker's CSV syntax needs, so
    # "device=0,1" reads as device=0 plus a bare "1" (a count): use deviceRequests for several GPUs.
    quirk = _container(gpus='"device=0,1"').plan.host["DeviceRequests"][0]
    assert (quirk["DeviceIDs"], quirk["Count"]) == (["0"], 1)
    with pytest.raises(InputValueError, match="conflicts with gpus"):
        _container(gpus="all", device_requests=[docker.ContainerDeviceRequestArgs(count=1)])


def test_uploads_follow_the_providers_tar_rules():
    reg = _container(uploads=[docker.ContainerUploadArgs(file="/a", content="x"),
                              docker.ContainerUploadArgs(file="/b", content_base64="eQ==", executable=True),
                              docker.ContainerUploadArgs(file="/c", content="z", permissions="0600", owner="1000", group="0")])
    assert [(u.path, u.mode, u.uid, u.gid, u.content) for u in reg.plan.uploads] == [
        ("/a", 0o644, 0, 0, b"x"), ("/b", 0o744, 0, 0, b"y"), ("/c", 0o600, 1000, 0, b"z")]
    with pytest.raises(InputValueError, match="exactly one of content, contentBase64, source"):
        _container(uploads=[docker.ContainerUploadArgs(file="/a", content="x", source="/etc/hostname")])


def test_healthcheck_durations_are_go_durations():
    assert go_duration_ns("1m30s") == 90 * 10**9 and go_duration_ns("500ms") == 5 * 10**8 and go_duration_ns("0") == 0
    with pytest.raises(InputValueError, match="healthcheck.interval.*Go duration"):
        _container(healthcheck=docker.ContainerHealthcheckArgs(tests=["CMD", "true"], interval="5 s"))


def test_volume_options_are_refused_below_api_1_45_like_the_provider():
    mount = docker.ContainerMountArgs(type="volume", target="/data", source="v",
                                      volume_options=docker.ContainerMountVolumeOptionsArgs(no_copy=True))
    with pytest.raises(InputValueError, match=r"mounts\[0\].volumeOptions.*1.45"):
        _container(mounts=[mount])


def test_unmapped_nested_field_is_refused_naming_type_field_and_urn():
    def program():
        docker.RemoteImage("img", name="x:1", build=docker.RemoteImageBuildArgs(context=".", builder="kit"))
    with pytest.raises(UnmappedFieldError) as error:
        run_program(program, RecordingMocks())
    message = str(error.value)
    assert "docker:index/remoteImage:RemoteImage" in message and "remoteImage:RemoteImage::img" in message
    assert "'build.builder' (builder) = 'kit'" in message


def test_unsupported_resource_type_is_refused():
    def program():
        docker.Image("i", image_name="x:1", skip_push=True, build=docker.DockerBuildArgs(context="."))
    with pytest.raises(UnsupportedResourceError, match="docker:index/image:Image .*not mapped"):
        run_program(program, RecordingMocks())


def test_duplicate_urn_is_refused():
    def program():
        docker.Network("same")
        docker.Network("same")
    with pytest.raises(DuplicateUrnError, match="duplicate URN .*Network::same"):
        run_program(program, RecordingMocks())


def test_components_providers_secrets_and_exports_are_recorded():
    class Box(pulumi.ComponentResource):
        def __init__(self, name, opts=None):
            super().__init__("sandstack:test:Box", name, None, opts)
            token = pulumi.Config().require_secret("token")
            self.net = docker.Network(f"{name}-net", internal=True, opts=pulumi.ResourceOptions(parent=self))
            docker.Container(f"{name}-c", image="img", envs=[token.apply(lambda t: f"TOKEN={t}")],
                             networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=self.net.name)],
                             opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["envs"]))
            self.register_outputs({"network": self.net.name})

    def program():
        provider = docker.Provider("local", host="unix:///var/run/docker.sock")
        box = Box("b", opts=pulumi.ResourceOptions(providers=[provider]))
        pulumi.export("network", box.net.name)
        pulumi.export("token", pulumi.Config().require_secret("token"))

    mocks = RecordingMocks()
    result = run_program(program, mocks, secret_config={"token": "s3cret"})
    container = mocks.by_name("b-c")
    assert container.urn == "urn:pulumi:test::sandstack::sandstack:test:Box$docker:index/container:Container::b-c"
    assert container.inputs["envs"] == ["TOKEN=s3cret"] and "envs" in container.secret_paths
    assert container.request.replace_on_changes == ("envs",) and container.provider.startswith("urn:pulumi:")
    assert container.plan.endpoints[0][0] == result.outputs["network"]  # the autoname flows into the connect
    assert result.outputs["network"].startswith("b-net-") and result.secret_outputs == {"token"}
    assert mocks.component_outputs[mocks.by_name("b").urn] == {"network": result.outputs["network"]}


def test_runs_are_isolated_and_leave_the_callers_event_loop_alone():
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        for _ in range(2):  # a second run starts from a fresh root stack and fresh registrations
            mocks = RecordingMocks()
            run_program(lambda: docker.Network("n"), mocks)
            assert len(mocks.registrations) == 1
        assert asyncio.get_event_loop() is loop
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _box(env: str = "A=1", memory: int = 64, healthcheck: str = "1s", **opts):
    def program():
        docker.Container("c", image="img", envs=[env], memory=memory,
                         healthcheck=docker.ContainerHealthcheckArgs(tests=["CMD", "true"], interval=healthcheck),
                         opts=pulumi.ResourceOptions(**opts))
    return program


@pytest.mark.parametrize("changed, expected", [
    ({}, "same"), ({"env": "A=2"}, "replace"), ({"memory": 128}, "update"),
    ({"healthcheck": "2s"}, "update"),   # shown as an update, never applied by the provider
    ({"healthcheck": "2s", "replace_on_changes": ["healthcheck"]}, "replace"),
    ({"env": "A=2", "ignore_changes": ["envs"]}, "same"),
])
def test_second_run_decides_like_pulumi_up(changed, expected):
    harness = Harness.dry()
    harness.run(_box(**{k: v for k, v in changed.items() if k in ("replace_on_changes", "ignore_changes")}))
    second = harness.run(_box(**changed))
    assert second.action("c").kind == expected, str(second)
    assert second.count("create") == 0


def test_resources_no_longer_declared_are_deleted_at_the_end_of_a_successful_run():
    harness = Harness.dry()
    harness.run(lambda: [docker.Network("a"), docker.Network("b")])
    second = harness.run(lambda: docker.Network("a"))
    assert second.summary()["delete"] == 1 and second.action("b").kind == "delete"
    failed = harness.run(lambda: docker.Network("x", driver=1), check=False)  # bad value: the run fails
    assert isinstance(failed.error, InputValueError) and "a" not in [a.name for a in failed.actions]


def test_state_file_carries_over_to_a_new_harness(tmp_path):
    state = tmp_path / "state.json"
    Harness.dry(state_path=str(state)).run(_box())
    second = Harness.dry(state_path=str(state)).run(_box(memory=128))
    assert second.action("c").kind == "update" and second.action("c").changed == ("memory",)


def test_a_failed_builds_message_ends_with_its_last_lines_however_the_daemon_cut_them():
    """A step's unbuffered stderr reaches the build stream a few characters at a time on a busy daemon: the error's
    tail is the last lines, joined, not the last chunks (it held 'n', 'e', 'd', ... of the step's message)."""
    from testbed.provider.mocks import HarnessError
    from testbed.harness.other_ops import build_image
    from testbed.provider.other_maps import ImagePlan

    message = "curl: (22) The requested URL returned error: 403 for http://refused.test/\n"

    class Api:
        def build(self, **_):
            yield {"stream": "Step 3/3 : RUN curl -fsS http://refused.test/\n"}
            # stderr, as the daemon sends it: each chunk in its colour codes (the 403 read `4ESC[0mESC[91m03`).
            yield from ({"stream": f"\x1b[91m{char}\x1b[0m"} for char in message)
            yield {"error": "The command returned a non-zero code: 22"}

    plan = ImagePlan(name="t/fetch:1", build={"path": "/ctx", "labels": {}})
    with pytest.raises(HarnessError) as failed:
        build_image(Api(), plan, {}, "urn:t")
    assert str(failed.value).endswith("--- last build output ---\nStep 3/3 : RUN curl -fsS http://refused.test/\n"
                                      + message.rstrip("\n"))
