#!/usr/bin/python3
"""What `gst-inspect-1.0 jobflow` shows is what docs/elements.md says: the
plugin has exactly the documented elements, each element's own properties
and signals appear (as `name`) in its section of docs/elements.md, and
elements get GStreamer's default names from their factory: jobfunction0,
jobfunction1, jobsink0, ... (users address elements by these names, e.g. in
gst-launch's `name.` references and GST_DEBUG output).

Usage: element_names.py BUILD_DIR (Debian's /usr/bin/python3 with python3-gi)."""
import os
import re
import sys
import tempfile

build = os.path.abspath(sys.argv[1])
os.environ["GST_PLUGIN_PATH"] = os.path.join(build, "plugin")
os.environ["GST_REGISTRY"] = os.path.join(tempfile.mkdtemp(), "registry.bin")

import gi  # noqa: E402

gi.require_version("Gst", "1.0")
from gi.repository import GObject, Gst  # noqa: E402

Gst.init(None)
factories = ["jobfunction", "jobsink", "jobdatasrc", "jobconvert", "jobdecode", "jobbatch", "jobunbatch", "jobmux",
             "jobdemux", "jobtrack", "joboverlay", "jobmetapublish",
             "jobcrop"]
plugin = Gst.Registry.get().find_plugin("jobflow")
if plugin is None:
    sys.exit("FAIL: no jobflow plugin in " + os.environ["GST_PLUGIN_PATH"])
listed = sorted(f.get_name() for f in Gst.Registry.get().get_feature_list_by_plugin("jobflow")
                if isinstance(f, Gst.ElementFactory))
if listed != sorted(factories):
    sys.exit(f"FAIL: the plugin lists {listed}, expected {sorted(factories)}")
failures = []

# Every element's own properties and signals in its section of the docs.
docs_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "elements.md")
with open(docs_path, encoding="utf-8") as f:
    sections = {m.group(1): m.group(2) for m in re.finditer(r"^## (\w+)\n(.*?)(?=^## |\Z)", f.read(), re.M | re.S)}
for name in factories:
    if name not in sections:
        failures.append(f"{name}: no section '## {name}' in docs/elements.md")
        continue
    element = Gst.ElementFactory.make(name, "docs-check")  # named: the default-name counters stay at 0
    gtype = element.__gtype__
    props = [p.name for p in element.list_properties() if p.owner_type == gtype]
    signals = list(GObject.signal_list_names(gtype))
    for what, names in (("property", props), ("signal", signals)):
        missing = [n for n in names if f"`{n}`" not in sections[name]]
        if missing:
            failures.append(f"{name}: {what} {', '.join(missing)} not in its section of docs/elements.md")
documented = sorted(n for n in sections if n.startswith("job"))
if documented != sorted(factories):
    failures.append(f"docs/elements.md has sections for {documented}, the plugin {sorted(factories)}")
if failures:
    sys.exit("FAIL: " + "; ".join(failures))

for name in factories:
    got = [Gst.ElementFactory.make(name, None).get_name() for _ in range(2)]
    want = [name + "0", name + "1"]
    if got != want:
        failures.append(f"{name}: default names {got}, expected {want}")
if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print("documented:", ", ".join(factories))
print("default names:", ", ".join(f + "0" for f in factories))
