#!/usr/bin/env bash
# Does provisioning work on a bare Debian 12, the lab VM's system? Debootstraps a minimal
# bookworm root file system, clones this repository into it as /vagrant, does there what
# the Vagrantfile does (apt-get install make, then scripts/provision.sh with the venv in
# /opt), runs provision.sh a second time (it must find everything in place), then a smoke
# test: `pubsublab doctor`, `pubsublab plan demo`, a simulated flood-demo run, and the
# system Python exec'ing topologies/custom.py as `mn --custom` does (mn itself is not run:
# on an error it cleans up machine-wide, and the host's OVS socket is mounted in).
#
# Everything inside runs under chroot in its own mount and PID namespaces: the /proc,
# /sys and /dev mounts exist only there and vanish with them, and every process started
# inside (daemons that package scripts start included) dies when the check ends, even when
# it fails. The host's Open vSwitch socket is mounted in, so the doctor finds the switch
# running and no second Open vSwitch is started. The root file system lives under
# /var/tmp (3.5 GB once provisioned) and is deleted at the end, pass or fail.
# Run as root: `sudo make check-provision`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUITE=bookworm

log() { printf '[check-provision] %s\n' "$*" >&2; }

if [[ $EUID -ne 0 ]]; then
    log "must run as root (try: sudo make check-provision)"; exit 1
fi
if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap debian-archive-keyring
fi
# The Debian mirror this machine's apt reaches ("500 URI bookworm/main amd64 Packages").
# (awk reads to the end: an early exit would fail apt-cache on a broken pipe.)
MIRROR="$(apt-cache policy | awk -v s="$SUITE/main" '$3 == s && !m { m = $2 } END { print m }')"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"

WORK="$(mktemp -d /var/tmp/pubsublab-check-provision.XXXXXX)"
ROOTFS="$WORK/root"
cleanup() {
    # Stopped mid-step (a signal), the step's namespace may still run: end it first
    # (unshare --kill-child takes every process inside with it).
    pkill -KILL -P $$ 2>/dev/null || true
    # The mounts were made in a private mount namespace that is gone by now; should any
    # show up under the root file system anyway, deleting it would reach into the host's
    # /dev or /sys, so it is kept and named instead.
    if grep -q " $WORK/" /proc/mounts; then
        log "mounts left under $WORK: not deleting it"; return
    fi
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
# bash runs a trap only once the foreground command ends, so the long steps run in the
# background, waited for: a signal then stops the check at once, and cleanup ends the step.
trap 'exit 130' INT
trap 'exit 143' TERM
waited() { "$@" & wait $!; }

started=$(date +%s)
step() { log "$(( $(date +%s) - started )) s: $*"; }

step "debootstrap $SUITE (minbase) from $MIRROR into $ROOTFS"
# In namespaces of its own too: its mounts in the target and its processes end with it.
waited unshare --mount --pid --fork --kill-child --propagation private \
    debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
# apt inside uses the same mirror, with bookworm-updates beside it as on an installed system.
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" \
    >"$ROOTFS/etc/apt/sources.list"
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
# This machine's own trust (local CA certificates, which a TLS-inspecting proxy on the way
# to the registries may need) goes in before ca-certificates is installed there, which
# adds them to the system bundle; the CA and proxy variables below pass through to pip.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$ROOTFS/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/"
fi
PASS_ENV=()
for name in PIP_CERT REQUESTS_CA_BUNDLE SSL_CERT_FILE http_proxy https_proxy no_proxy \
            PIP_INDEX_URL PIP_DEFAULT_TIMEOUT; do
    if [[ -n ${!name:-} ]]; then PASS_ENV+=("$name=${!name}"); fi
done
# What a VM's provisioning would start as services stays stopped here (see policy-rc.d(8)).
printf '#!/bin/sh\nexit 101\n' >"$ROOTFS/usr/sbin/policy-rc.d"
chmod +x "$ROOTFS/usr/sbin/policy-rc.d"

step "cloning $REPO (HEAD) into /vagrant"
git clone -q --no-hardlinks "$REPO" "$ROOTFS/vagrant"

# inside [--net] SCRIPT: runs SCRIPT with bash inside the root file system (see the
# header); with --net in a network namespace of its own, whose loopback is up.
inside() {
    local net=()
    if [[ $1 == --net ]]; then net=(--net); shift; fi
    waited unshare "${net[@]}" --mount --pid --fork --kill-child --propagation private \
        /bin/bash -euo pipefail -c '
            root=$1; shift
            mount -t proc proc "$root/proc"
            mount --rbind /sys "$root/sys"
            mount --rbind /dev "$root/dev"
            mkdir -p "$root/run/openvswitch"
            mount --bind /run/openvswitch "$root/run/openvswitch"
            ip link set lo up
            script=$1; shift
            exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
                HOME=/root LANG=C.UTF-8 "$@" /bin/bash -euo pipefail -c "$script"
        ' inside "$ROOTFS" "$1" "${PASS_ENV[@]}"
}

step "as the Vagrantfile: apt-get install make, then scripts/provision.sh"
inside 'export PUBSUBLAB_VENV=/opt/pubsublab-venv DEBIAN_FRONTEND=noninteractive
        apt-get update -q && apt-get install -y -q make
        /vagrant/scripts/provision.sh'
step "provision.sh again (must find everything in place)"
again_ns=$(date +%s%N)
inside 'PUBSUBLAB_VENV=/opt/pubsublab-venv /vagrant/scripts/provision.sh'
step "the second provision.sh took $(( ($(date +%s%N) - again_ns) / 1000000 )) ms"

step "smoke test (network namespace of its own): doctor, plan demo, sim flood-demo, custom.py"
inside --net 'cd /vagrant && bin=/opt/pubsublab-venv/bin
        /usr/bin/python3 -c "f = \"topologies/custom.py\"; exec(compile(open(f).read(), f, \"exec\"), {})"
        $bin/pubsublab doctor
        $bin/pubsublab plan demo >/dev/null
        $bin/pubsublab sim flood-demo --out /root/runs --json | tail -1 >/root/sim.json
        $bin/python -c "import json; s = json.load(open(\"/root/sim.json\"))[\"flood\"]
assert s[\"delivered\"] > 0 and s[\"missing\"] == 0 and s[\"duplicates\"] == 0, s
print(\"flood-demo (simulated):\", s[\"delivered\"], \"delivered, none missing\")"'
step "passed; the root file system took $(du -sh --one-file-system "$ROOTFS" | cut -f1)"
