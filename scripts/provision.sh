#!/usr/bin/env bash
# Idempotent provisioning for pubsublab: system packages, Open vSwitch, the venv.
# Used by the Makefile (`make setup`) and by the Vagrantfile alike. Run as root.
# A second run only checks and finishes in seconds.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PUBSUBLAB_VENV:-$REPO/.venv}"
# tshark is the reference of `pubsublab bench analysis`; under DEBIAN_FRONTEND=noninteractive
# wireshark-common's question about capture by non-root users takes its default (no).
# chromium and chromium-driver: the test that opens `pubsublab reproduce`'s page headless.
# tmux: the tests of `pubsublab watch` read its screen from a tmux pane.
# git: every run's manifest records the revision (a bare Debian 12 has no git).
# mosquitto and mosquitto-clients: the peer of `pubsublab bench broker --peer mosquitto`
# (started on its own port by the benchmark; its load generator is mosquitto_pub).
# openssh-server and sudo: runs spread over servers (run --servers) use Mininet's cluster
# edition, which reaches the other servers by SSH and runs its commands there through
# sudo. The two-server test starts an sshd of its own in a network namespace; the
# package's service is left as Debian sets it up (the lab VMs run sshd already).
# python3-networkx, -yaml, -numpy: `mn --custom topologies/custom.py` runs the topology
# builders in the system Python, and they reach nodes.cores, which imports numpy.
APT_PACKAGES=(mininet openvswitch-switch tcpdump tshark bridge-utils ethtool iperf3
              iputils-ping iproute2 procps psmisc openjdk-17-jre-headless
              python3-venv python3-pip python3-networkx python3-yaml python3-numpy
              chromium chromium-driver tmux git mosquitto mosquitto-clients
              openssh-server sudo)

log() { printf '[provision] %s\n' "$*" >&2; }

if [[ $EUID -ne 0 ]]; then
    log "must run as root (try: sudo make setup)"; exit 1
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
    # Ubuntu 22.04 ships Java 17 under the same name; accept any installed JRE >= 17.
    if [[ $p == openjdk-17-jre-headless ]] && command -v java >/dev/null \
        && java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])'; then
        continue
    fi
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing apt packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # Some distributions name the JRE differently; fall back to the default headless JRE.
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}"; then
        missing=("${missing[@]/openjdk-17-jre-headless/default-jre-headless}")
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
else
    log "apt packages present"
fi

# Open vSwitch: no kernel module on some machines; ovs-ctl still starts ovsdb-server
# and ovs-vswitchd, and the userspace datapath (datapath=user) works without it.
if ! ovs-vsctl --timeout=2 show >/dev/null 2>&1; then
    log "starting Open vSwitch"
    /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null 2>&1 \
        || /usr/share/openvswitch/scripts/ovs-ctl start --no-ovs-vswitchd --system-id=random
    ovs-vsctl --timeout=5 show >/dev/null
else
    log "Open vSwitch running"
fi

# Runs record the revision as root; git reads a checkout another user owns (the VM's
# rsync'ed /vagrant) only from a folder marked safe.
if [[ -e $REPO/.git ]] && ! git config --system --get-all safe.directory 2>/dev/null \
        | grep -qxF "$REPO"; then
    git config --system --add safe.directory "$REPO"
fi

# The venv sees Debian's Mininet through --system-site-packages.
if [[ ! -x $VENV/bin/python ]]; then
    log "creating venv $VENV"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
stamp="$VENV/.pubsublab-installed"
if [[ ! -f $stamp || $REPO/pyproject.toml -nt $stamp ]]; then
    log "installing pubsublab (editable) and its dependencies"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e "$REPO[dev]"
    touch "$stamp"
else
    log "venv up to date"
fi
log "done"
