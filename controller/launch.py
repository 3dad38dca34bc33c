"""Process entry of the controller::

    python -m controller.launch --dir RUN/controller [--host 127.0.0.1] [--port 6653]
        [--poll-s 1] [--idle-timeout-s 30] [--max-macs 4096] [--packet-in-rate-hz 1000]

os-ken 4.x has no manager command: the listen address goes into the framework's
configuration with ``cfg.CONF(args=[...])`` (the options registered by
:mod:`controller.framework`), the app's settings with ``set_override``, and
``AppManager.run_apps`` loads :mod:`controller.l2_monitor` together with the OpenFlow
handler it needs and blocks. The text log is ``DIR/controller.log``.

SIGTERM and SIGINT end the process at once, after a last log line: the framework's
native threads cannot be stopped (its ``hub.kill`` does nothing), so waiting for them
would hang, and nothing is lost, as the port statistics are written line by line.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from controller import IDLE_TIMEOUT_S, LOG_FILE, MAX_MACS_PER_DPID, PACKET_IN_RATE_HZ, POLL_S

APP = "controller.l2_monitor"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m controller.launch",
                                description="Run the pubsublab L2 learning and port-statistics "
                                            "controller (OpenFlow 1.3).")
    p.add_argument("--dir", type=Path, required=True,
                   help="output folder: controller.log, port_stats.jsonl, datapaths.json")
    p.add_argument("--host", default="127.0.0.1", help="OpenFlow listen address")
    p.add_argument("--port", type=int, default=6653, help="OpenFlow listen port")
    p.add_argument("--poll-s", type=float, default=POLL_S, help="port-statistics poll period")
    p.add_argument("--idle-timeout-s", type=int, default=IDLE_TIMEOUT_S,
                   help="idle timeout of flows")
    p.add_argument("--max-macs", type=int, default=MAX_MACS_PER_DPID,
                   help="MAC table cap per switch")
    p.add_argument("--packet-in-rate-hz", type=float, default=PACKET_IN_RATE_HZ,
                   help="packet-ins handled per switch per second")
    return p


def _log_to(path: Path) -> logging.Logger:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return logging.getLogger("controller.launch")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.poll_s <= 0 or args.idle_timeout_s < 0 or args.max_macs < 1 \
            or args.packet_in_rate_hz <= 0:
        print("controller.launch: need --poll-s > 0, --idle-timeout-s >= 0, --max-macs >= 1 "
              "and --packet-in-rate-hz > 0", file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    log = _log_to(args.dir / LOG_FILE)

    def stop(signo: int, _frame: object) -> None:
        log.info("stopping on %s", signal.Signals(signo).name)
        logging.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    from controller.framework import FRAMEWORK, cfg, run_apps
    from controller.l2_monitor import OPTS_GROUP

    # No configuration files: a run depends on its command line only.
    cfg.CONF(args=["--ofp-listen-host", args.host, "--ofp-tcp-listen-port", str(args.port)],
             project="pubsublab", default_config_files=[])
    for name, value in (("out_dir", str(args.dir)), ("poll_s", args.poll_s),
                        ("idle_timeout_s", args.idle_timeout_s),
                        ("max_macs_per_dpid", args.max_macs),
                        ("packet_in_rate_hz", args.packet_in_rate_hz)):
        cfg.CONF.set_override(name, value, group=OPTS_GROUP)
    log.info("%s controller pid %d listening on %s:%d (OpenFlow 1.3)", FRAMEWORK, os.getpid(),
             args.host, args.port)
    run_apps([APP])
    return 0


if __name__ == "__main__":
    sys.exit(main())
