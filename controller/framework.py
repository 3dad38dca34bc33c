"""The one module that imports the OpenFlow controller framework.

We run on os-ken, the maintained fork of Ryu (Ryu 4.34 does not run on Python 3.11): the
same app API under the package name ``os_ken``. Everything else in :mod:`controller`
imports the framework from here, so running the app under Ryu (a lab on an older Python)
means changing only the imports below: ``os_ken`` becomes ``ryu`` and
``app_manager.OSKenApp`` becomes ``app_manager.RyuApp``.

``controller.controller`` is imported for its side effect: it registers the
``--ofp-listen-host`` and ``--ofp-tcp-listen-port`` command-line options, which must
exist before ``cfg.CONF(args=...)`` parses them (the manager commands of Ryu and older
os-ken imported it the same way; os-ken 4.x has no manager command). ``hub.patch`` is
what ``ryu-manager`` calls first: Ryu's hub is eventlet, which must patch the standard
library; os-ken 4.x's default hub is native threads and its ``patch`` does nothing.
"""

from os_ken import cfg
from os_ken.base import app_manager
from os_ken.controller import controller as _registers_listen_options  # noqa: F401
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

hub.patch(thread=False)

BaseApp = app_manager.OSKenApp
run_apps = app_manager.AppManager.run_apps
FRAMEWORK = "os-ken"

__all__ = ["CONFIG_DISPATCHER", "DEAD_DISPATCHER", "FRAMEWORK", "MAIN_DISPATCHER", "BaseApp",
           "cfg", "hub", "ofp_event", "ofproto_v1_3", "run_apps", "set_ev_cls"]
