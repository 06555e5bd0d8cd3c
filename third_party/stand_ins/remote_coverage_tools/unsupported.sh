#!/bin/sh
echo "coverage is not supported by et_cpu_plugin's offline build (remote_coverage_tools is a stand-in)" >&2
exit 1
