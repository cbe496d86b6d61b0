#!/usr/bin/python3
"""Elements get GStreamer's default names from their factory: jobfunction0,
jobfunction1, jobsink0, ... (users address elements by these names, e.g. in
gst-launch's `name.` references and GST_DEBUG output).

Usage: element_names.py BUILD_DIR (Debian's /usr/bin/python3 with python3-gi)."""
import os
import sys
import tempfile

build = os.path.abspath(sys.argv[1])
os.environ["GST_PLUGIN_PATH"] = os.path.join(build, "plugin")
os.environ["GST_REGISTRY"] = os.path.join(tempfile.mkdtemp(), "registry.bin")

import gi  # noqa: E402

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

Gst.init(None)
factories = ["jobfunction", "jobsink", "jobdatasrc", "jobconvert", "jobdecode", "jobbatch", "jobunbatch", "jobtrack",
             "joboverlay"]
plugin = Gst.Registry.get().find_plugin("jobflow")
if plugin is None:
    sys.exit("FAIL: no jobflow plugin in " + os.environ["GST_PLUGIN_PATH"])
listed = sorted(f.get_name() for f in Gst.Registry.get().get_feature_list_by_plugin("jobflow")
                if isinstance(f, Gst.ElementFactory))
if listed != sorted(factories):
    sys.exit(f"FAIL: the plugin lists {listed}, expected {sorted(factories)}")
failures = []
for name in factories:
    got = [Gst.ElementFactory.make(name, None).get_name() for _ in range(2)]
    want = [name + "0", name + "1"]
    if got != want:
        failures.append(f"{name}: default names {got}, expected {want}")
if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print("default names:", ", ".join(f + "0" for f in factories))
