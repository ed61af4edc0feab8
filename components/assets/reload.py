# sandstack reload container: delivers one host service's configuration into its configuration volume, joins the
# service to the networks the configuration names, and waits until the service has it in force (the protocol:
# sandstack/plan/reload.py). Runs once per changed configuration; Pulumi waits for its exit (`attach`), and a
# non-zero exit fails the apply with this container's log, the service's refusal included.
#   SANDSTACK_CONFIG_DIR      the volume (the service sees it at the same path)
#   SANDSTACK_CONFIG_DIGEST   this configuration's digest, which the service reports once it has it in force
#   SANDSTACK_CONFIG_KEYS     its items' names, space-separated; each item is the variable of that name
#   SANDSTACK_CONFIG_SERVICE  the service's container name
#   SANDSTACK_CONFIG_WAIT     seconds to wait for the service
#   SANDSTACK_CONFIG_JOIN     (optional) one "network address alias..." a line: networks the service must be on;
#   SANDSTACK_CONFIG_LEAVE    with it, label filters ("key=value" or "key", space-separated): a network with all of
#                             those labels that is not named is left
# The Docker socket is mounted only where networks are joined (the gateway's and the ingress's reload).
import os
import shutil
import sys
import time

root = os.environ["SANDSTACK_CONFIG_DIR"]
digest = os.environ["SANDSTACK_CONFIG_DIGEST"]
keys = os.environ["SANDSTACK_CONFIG_KEYS"].split()
service = os.environ["SANDSTACK_CONFIG_SERVICE"]
wait = float(os.environ["SANDSTACK_CONFIG_WAIT"])
sets, status = os.path.join(root, "sets"), os.path.join(root, "status")


def say(message):
    print(f"sandstack-reload {service}: {message}", flush=True)


def fail(message):
    say(message)
    sys.exit(1)


def read(name):
    try:
        with open(os.path.join(status, name)) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def write_set():
    """sets/<digest>/<NAME>, made whole under a temporary name, then renamed: a service never reads half a set."""
    final = os.path.join(sets, digest)
    if os.path.isdir(final):
        return
    os.makedirs(sets, exist_ok=True)
    tmp = os.path.join(sets, f".{digest}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.mkdir(tmp, 0o755)
    for key in keys:
        path = os.path.join(tmp, key)
        with open(path, "w") as f:
            f.write(os.environ.get(key, ""))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(path, 0o644)
    os.rename(tmp, final)


def point_want():
    # The service writes its reports here as its own user (squid's, Caddy's): only it and this container mount the
    # volume, so the directory is everyone's.
    os.makedirs(status, exist_ok=True)
    os.chmod(status, 0o777)
    link = os.path.join(root, f".want.{os.getpid()}")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(os.path.join("sets", digest), link)
    os.replace(link, os.path.join(root, "want"))


def join_networks():
    """Connects the service to each named network at its address (again, where it is on it at another one), and
    disconnects it from the labelled networks no longer named. Done before `want` moves, so the service sees its new
    interfaces when it applies the configuration."""
    wanted = [line.split() for line in os.environ.get("SANDSTACK_CONFIG_JOIN", "").splitlines() if line.strip()]
    leave = os.environ.get("SANDSTACK_CONFIG_LEAVE", "")
    if not wanted and not leave:
        return
    import docker  # the infra image's python3-docker; only these reload containers have the socket

    api = docker.APIClient(base_url="unix:///var/run/docker.sock", timeout=60)
    try:
        on = api.inspect_container(service)["NetworkSettings"]["Networks"] or {}
    except docker.errors.NotFound:
        fail("its service container does not exist")
    names = {w[0] for w in wanted}
    for net in api.networks(filters={"label": leave.split()}) if leave else ():
        if net["Name"] in on and net["Name"] not in names:
            api.disconnect_container_from_network(service, net["Name"])
            say(f"left network {net['Name']}")
    for network, address, *aliases in wanted:
        current = on.get(network)
        if current is not None:
            if ((current.get("IPAMConfig") or {}).get("IPv4Address") == address
                    and set(aliases) <= set(current.get("Aliases") or ())):
                continue
            api.disconnect_container_from_network(service, network)
        api.connect_container_to_network(service, network, ipv4_address=address, aliases=aliases or None)
        say(f"joined network {network} at {address}")


def wait_in_force():
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if read("have") == digest:
            return
        refused = read("refused")
        if refused.split(" ", 1)[0] == digest:
            fail(f"refused configuration {digest}, keeping {read('have') or 'none'}: {refused.split(' ', 1)[-1]}")
        time.sleep(0.05)
    fail(f"did not take configuration {digest} within {wait:g} s (in force: {read('have') or 'none'})")


def prune():
    """Every set but this one and the one in force (a service mid-reload still reads it)."""
    keep = {digest, read("have")}
    for name in os.listdir(sets):
        if name not in keep:
            shutil.rmtree(os.path.join(sets, name), ignore_errors=True)


write_set()
join_networks()
point_want()
wait_in_force()
prune()
say(f"configuration {digest} in force")
