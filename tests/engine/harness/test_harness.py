"""The engine harness against the real daemon, with small test-only programs built on pulumi_docker.

Traffic stays on this machine: the host's loopback and the containers these tests start.
"""

from __future__ import annotations

import base64
import urllib.request

import pulumi
import pulumi_docker as docker
import pytest

from testbed.harness.docker_backend import LABEL_SESSION
from testbed.harness.teardown import remaining
from testbed.provider.mocks import HarnessError, UnmappedFieldError, UnsupportedResourceError

pytestmark = pytest.mark.docker


# busybox: no `nc -z`, and its wget segfaults; speak HTTP over nc.
HTTP_GET = "printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {host} 8080 | grep -q 'hello from the harness'"


def web_stack(image: str, source_file: str, env: str = "MODE=a", memory: int = 64):
    """A network, a web server with uploads/limits/port, and a one-shot probe that reaches it by alias."""
    def program():
        net = docker.Network("web-net", labels=[docker.NetworkLabelArgs(label="sandstack.test", value="harness")])
        web = docker.Container(
            "web", image=image, command=["httpd", "-f", "-p", "8080", "-h", "/www"], envs=[env],
            uploads=[docker.ContainerUploadArgs(file="/www/index.html", content="hello from the harness\n"),
                     docker.ContainerUploadArgs(file="/www/raw.bin", content_base64=base64.b64encode(b"\x00\x01ok").decode()),
                     docker.ContainerUploadArgs(file="/opt/tool.sh", source=source_file, permissions="0750",
                                                owner="1000", group="1000")],
            memory=memory, memory_swap=memory, cpus="0.5",
            ulimits=[docker.ContainerUlimitArgs(name="nofile", soft=256, hard=512)],
            capabilities=docker.ContainerCapabilitiesArgs(drops=["NET_RAW"]),
            tmpfs={"/tmp": "rw,size=8m"},
            ports=[docker.ContainerPortArgs(internal=8080, ip="127.0.0.1")],
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=net.name, aliases=["web.internal"])],
            healthcheck=docker.ContainerHealthcheckArgs(tests=["CMD-SHELL", HTTP_GET.format(host="127.0.0.1")],
                                                        interval="200ms", retries=25),
            wait=True, wait_timeout=30)
        probe = docker.Container(
            "probe", image=image, command=["sh", "-c", HTTP_GET.format(host="web.internal") + " && echo reachable"],
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=net.name)],
            attach=True, logs=True, must_run=False, opts=pulumi.ResourceOptions(depends_on=[web]))
        pulumi.export("port", web.ports[0].external)
        pulumi.export("web", web.name)
        pulumi.export("web_ip", web.network_datas[0].ip_address)
        pulumi.export("network", net.name)
        pulumi.export("probe_logs", probe.container_logs)
    return program


@pytest.fixture
def tool_file(tmp_path):
    path = tmp_path / "tool.sh"
    path.write_text("#!/bin/sh\necho tool\n")
    return str(path)


def test_network_container_uploads_limits_and_ports_are_applied_to_the_engine(docker_harness, docker_client,
                                                                               busybox_image, tool_file):
    docker_harness.proves(
        "Network.labels", "Container.uploads.content", "Container.uploads.contentBase64", "Container.uploads.source",
        "Container.uploads.permissions", "Container.uploads.owner", "Container.uploads.group", "Container.memory",
        "Container.memorySwap", "Container.cpus", "Container.ulimits", "Container.capabilities.drops",
        "Container.tmpfs", "Container.ports.ip", "Container.networksAdvanced.aliases",
        "Container.healthcheck.tests", "Container.wait", "Container.attach", "Container.logs")
    result = docker_harness.run(web_stack(busybox_image, tool_file))

    assert result.summary() == {"create": 3, "update": 0, "replace": 0, "delete": 0, "same": 0, "build": 0}
    page = urllib.request.urlopen(f"http://127.0.0.1:{result.outputs['port']}/index.html", timeout=5).read()
    assert page == b"hello from the harness\n"
    assert result.outputs["probe_logs"].strip() == "reachable"      # alias resolved on the user network

    web = docker_client.containers.get(result.outputs["web"])
    host = web.attrs["HostConfig"]
    assert (host["Memory"], host["MemorySwap"], host["NanoCpus"]) == (64 * 2**20, 64 * 2**20, 500_000_000)
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": 256, "Hard": 512}] and host["CapDrop"] == ["NET_RAW"]
    assert host["Tmpfs"] == {"/tmp": "rw,size=8m"}
    assert host["PortBindings"] == {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": "0"}]}
    assert list(web.attrs["NetworkSettings"]["Networks"]) == [result.outputs["network"]]  # bridge disconnected
    assert web.labels[LABEL_SESSION] == docker_harness.session_id
    assert web.exec_run("stat -c '%a %u %g' /opt/tool.sh").output.decode().strip() == "750 1000 1000"
    assert web.exec_run("stat -c '%a %u' /www/index.html").output.decode().strip() == "644 0"
    assert web.exec_run("cat /www/raw.bin").output == b"\x00\x01ok"


def test_uploads_into_a_read_only_container_fail_like_the_provider(docker_harness, busybox_image):
    docker_harness.proves("Container.readOnly", "Container.mounts.source", "Container.uploads.file")

    def program(target: str):
        def run():
            data = docker.Volume("data")
            docker.Container("ro", image=busybox_image, command=["sleep", "60"], read_only=True,
                             mounts=[docker.ContainerMountArgs(type="volume", target="/data", source=data.name)],
                             uploads=[docker.ContainerUploadArgs(file=target, content="x")])
        return run
    # The provider copies uploads into the created container before start (funcs.go:505-582); this daemon
    # refuses any archive into a container with a read-only root filesystem, even onto a mounted volume.
    for target in ("/etc/sandbox.conf", "/data/sandbox.conf"):
        with pytest.raises(HarnessError, match="container rootfs is marked read-only"):
            docker_harness.run(program(target))
    assert docker_harness.last.action("ro").changed == ("<tainted>",)  # the half-made one was replaced


def test_second_identical_run_creates_nothing_and_keeps_the_objects(docker_harness, docker_client,
                                                                     busybox_image, tool_file):
    first = docker_harness.run(web_stack(busybox_image, tool_file))
    web_id = docker_client.containers.get(first.outputs["web"]).id
    again = docker_harness.run(web_stack(busybox_image, tool_file))
    assert again.summary() == {"create": 0, "update": 0, "replace": 0, "delete": 0, "same": 3, "build": 0}
    assert again.outputs["port"] == first.outputs["port"]
    assert docker_client.containers.get(again.outputs["web"]).id == web_id


def test_changed_env_replaces_the_container_delete_before_create(docker_harness, docker_client,
                                                                  busybox_image, tool_file):
    first = docker_harness.run(web_stack(busybox_image, tool_file, env="MODE=a"))
    second = docker_harness.run(web_stack(busybox_image, tool_file, env="MODE=b"))
    action = second.action("web")
    assert (action.kind, action.changed) == ("replace", ("envs",)) and "delete-before-replace" in action.detail
    assert second.action("web-net").kind == "same" and second.outputs["network"] == first.outputs["network"]
    assert second.outputs["web"] != first.outputs["web"]     # a fresh autoname for the replacement
    assert not docker_client.containers.list(all=True, filters={"name": first.outputs["web"]})
    assert "MODE=b" in docker_client.containers.get(second.outputs["web"]).attrs["Config"]["Env"]


def test_memory_change_is_updated_in_place(docker_harness, docker_client, busybox_image, tool_file):
    docker_harness.proves("Container.memory")
    first = docker_harness.run(web_stack(busybox_image, tool_file, memory=64))
    second = docker_harness.run(web_stack(busybox_image, tool_file, memory=96))
    assert second.action("web").kind == "update" and second.outputs["web"] == first.outputs["web"]
    assert docker_client.containers.get(second.outputs["web"]).attrs["HostConfig"]["Memory"] == 96 * 2**20


def app_image(base: str, context: str, name: str, greeting: str):
    def program():
        image = docker.RemoteImage("app-image", name=name, build=docker.RemoteImageBuildArgs(
            context=context, build_args={"GREETING": greeting}, target="final", labels={"sandstack.test": "app"}))
        app = docker.Container("app", image=image.image_id, command=["sleep", "300"])
        pulumi.export("image_id", image.image_id)
        pulumi.export("app", app.name)
    return program


def test_remote_image_builds_once_and_a_version_bump_moves_the_container(docker_harness, docker_client,
                                                                           busybox_image, tmp_path):
    docker_harness.proves("RemoteImage.build.context", "RemoteImage.build.buildArgs", "RemoteImage.build.target",
                          "RemoteImage.build.labels")
    (tmp_path / "Dockerfile").write_text(
        f"FROM {busybox_image} AS base\nARG GREETING\nRUN echo \"$GREETING\" > /greeting\n"
        f"FROM base AS final\nRUN echo final > /stage\n")
    repo = f"sandstack-harness-test/app-{docker_harness.session_id}"
    first = docker_harness.run(app_image(busybox_image, str(tmp_path), f"{repo}:1", "v1"))
    assert first.builds == 1
    again = docker_harness.run(app_image(busybox_image, str(tmp_path), f"{repo}:1", "v1"))
    assert again.builds == 0 and again.count("create") == 0

    bumped = docker_harness.run(app_image(busybox_image, str(tmp_path), f"{repo}:2", "v2"))
    assert bumped.builds == 1 and bumped.action("app-image", "replace").changed == ("build", "name")
    assert bumped.action("app").kind == "replace" and bumped.action("app").changed == ("image",)
    app = docker_client.containers.get(bumped.outputs["app"])
    assert app.image.id == bumped.outputs["image_id"] != first.outputs["image_id"]
    assert app.exec_run("cat /greeting /stage").output == b"v2\nfinal\n"
    assert bumped.action("app-image", "delete").detail == "removed"   # the old image, at the end of the run
    assert not docker_client.images.list(name=repo.split(":")[0] + ":1")


def test_remote_image_without_build_is_never_pulled(docker_harness, busybox_image):
    with pytest.raises(HarnessError, match="never pulls"):
        docker_harness.run(lambda: docker.RemoteImage("missing", name="sandstack-harness-test/absent:0"))
    kept = docker_harness.run(lambda: docker.RemoteImage("base", name=busybox_image, keep_locally=True))
    assert kept.action("base").kind == "create"
    docker_harness.teardown()       # the cached test image must survive a teardown
    assert docker_harness.backend.api.inspect_image(busybox_image)


def test_unmapped_field_is_refused_naming_type_field_and_urn(docker_harness, tmp_path):
    def program():
        docker.Network("ok")
        docker.RemoteImage("img", name="x:1", build=docker.RemoteImageBuildArgs(context=str(tmp_path), builder="kit"))
    failed = docker_harness.run(program, check=False)
    assert isinstance(failed.error, UnmappedFieldError)
    assert "docker:index/remoteImage:RemoteImage" in str(failed.error) and "::img" in str(failed.error)
    assert "'build.builder' (builder)" in str(failed.error)


def test_non_local_provider_is_refused(docker_harness, busybox_image):
    def program():
        remote = docker.Provider("remote", host="tcp://127.0.0.1:2375")
        docker.Container("c", image=busybox_image, opts=pulumi.ResourceOptions(provider=remote))
    with pytest.raises(UnsupportedResourceError, match="targets host 'tcp://127.0.0.1:2375'"):
        docker_harness.run(program)
    with pytest.raises(UnsupportedResourceError, match=r"provider \(default\) targets host 'tcp://127.0.0.1:2375'"):
        docker_harness.run(lambda: docker.Network("n"), config={"docker:host": "tcp://127.0.0.1:2375"})
    local = docker_harness.run(lambda: docker.Network("n", opts=pulumi.ResourceOptions(
        provider=docker.Provider("local", host="unix:///run/docker.sock"))))   # /var/run -> /run: same socket
    assert local.action("n").kind == "create"


def test_invokes_read_the_local_daemon(docker_harness, busybox_image):
    def program():
        net = docker.Network("n")
        found = net.name.apply(lambda name: docker.get_network(name=name))
        pulumi.export("driver", found.driver)
        pulumi.export("image", docker.get_remote_image(name=busybox_image).id)
    result = docker_harness.run(program)
    assert result.outputs["driver"] == "bridge" and result.outputs["image"].startswith("sha256:")


def test_networks_advanced_on_the_network_mode_network_loses_its_aliases_like_the_provider(docker_harness,
                                                                                          busybox_image):
    def program():
        net = docker.Network("n")
        docker.Container("c", image=busybox_image, command=["sleep", "60"], network_mode=net.name,
                         networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=net.name, aliases=["a"])])
    result = docker_harness.run(program)
    # The provider creates the container on network_mode, then connects networks_advanced again; on this
    # daemon the second connect of a created container to the same network drops the aliases.
    info = docker_harness.backend.api.inspect_container(result.mocks.by_name("c").id)
    aliases = info["NetworkSettings"]["Networks"][result.mocks.by_name("n").outputs["name"]]["Aliases"]
    assert "a" not in aliases


def test_teardown_leaves_nothing_even_after_a_failed_run(docker_harness, busybox_image):
    def program():
        docker.Volume("data")
        net = docker.Network("n")
        # wait=True without a healthcheck: the provider errors after creating and starting the container
        docker.Container("c", image=busybox_image, command=["sleep", "60"], wait=True,
                         networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=net.name)])
    failed = docker_harness.run(program, check=False)
    assert "does not have a healthcheck" in str(failed.error)
    assert docker_harness.state.get(failed.mocks.by_name("c").urn).tainted
    api = docker_harness.backend.api
    api.create_network("stray", labels={LABEL_SESSION: docker_harness.session_id})  # unknown to the state
    assert set(remaining(api, docker_harness.session_id)) == {"containers", "networks", "volumes"}
    swept = docker_harness.teardown()
    assert swept == {"networks": ["stray"]}
    assert remaining(api, docker_harness.session_id) == {}


def test_parallel_registrations_and_removed_resources(docker_harness, docker_client, busybox_image):
    def program(count: int):
        def run():
            for i in range(count):
                net = docker.Network(f"n{i}")
                docker.Container(f"c{i}", image=busybox_image, command=["sleep", "60"], stop_timeout=1,
                                 mounts=[docker.ContainerMountArgs(type="tmpfs", target="/scratch",
                                         tmpfs_options=docker.ContainerMountTmpfsOptionsArgs(size_bytes=2**20))],
                                 networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=net.name)])
        return run
    first = docker_harness.run(program(6))
    assert first.count("create", "Container") == 6 and first.count("create", "Network") == 6
    names = {r.outputs["name"] for r in first.registrations.values()}
    assert len(names) == 12
    shrunk = docker_harness.run(program(2))
    assert shrunk.count("delete") == 8 and shrunk.count("same") == 4
    assert len(docker_client.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={docker_harness.session_id}"})) == 2


def test_one_shot_container_without_must_run_false_runs_again_on_every_run(docker_harness, docker_client,
                                                                           busybox_image):
    def program():
        # attach waits for the end; must_run keeps its default (true): a component bug worth catching.
        job = docker.Container("job", image=busybox_image, command=["true"], attach=True)
        pulumi.export("job", job.name)
    first = docker_harness.run(program)
    container = docker_client.containers.get(first.outputs["job"])
    started = container.attrs["State"]["StartedAt"]
    second = docker_harness.run(program)
    # Provider semantics: state read must_run=false for the exited container, so the next up "updates"
    # it back to true by starting it again.
    assert second.action("job").kind == "update" and second.action("job").changed == ("mustRun",)
    container.reload()
    assert container.attrs["State"]["StartedAt"] != started
