"""`plugin_wheel`: the delegate's Python packages and runtime library as one installable wheel.

The Python modules are the transitive sources of `deps` that lie under `packages` (tests left
out), generated ones (the flatc schema module) included; `data` and `libraries` go beside them
at their workspace paths. Everything lands under the top-level package `dist_name`, and the
builder (build_wheel.py) moves the imports of `packages` there.
"""

# Bazel's --cpu values -> the wheel's platform tag.
_PLATFORMS = {
    "aarch64": "linux_aarch64",
    "k8": "linux_x86_64",
}

def _in_packages(short_path, packages):
    if "/test/" in short_path:
        return False
    for package in packages:
        if short_path.startswith(package + "/"):
            return True
    return False

def _plugin_wheel_impl(ctx):
    cpu = ctx.var.get("TARGET_CPU", "")
    if cpu not in _PLATFORMS:
        fail("plugin_wheel: no wheel platform tag for --cpu={} (known: {})".format(cpu, ", ".join(_PLATFORMS)))
    tag = "py3-none-" + _PLATFORMS[cpu]
    name = ctx.attr.dist_name
    out = ctx.actions.declare_file("{}-{}-{}.whl".format(name, ctx.attr.version, tag))

    sources = depset(transitive = [dep[PyInfo].transitive_sources for dep in ctx.attr.deps])
    modules = [s for s in sources.to_list() if _in_packages(s.short_path, ctx.attr.packages)]

    args = ctx.actions.args()
    args.add("--out", out)
    args.add("--name", name)
    args.add("--version", ctx.attr.version)
    args.add("--tag", tag)
    args.add("--summary", ctx.attr.summary)
    args.add("--readme", ctx.file.readme)
    args.add("--lock", ctx.file.lock)
    args.add_all(ctx.attr.requires, before_each = "--requires")
    args.add_all(ctx.attr.packages, before_each = "--rewrite")
    args.add("--module", "{}={}/__init__.py".format(ctx.file.package_init.path, name))
    for source in modules:
        args.add("--module", "{}={}/{}".format(source.path, name, source.short_path))
    for source in ctx.files.data:
        args.add("--data", "{}={}/{}".format(source.path, name, source.short_path))
    for library in ctx.files.libraries:
        args.add("--library", "{}={}/{}".format(library.path, name, library.short_path))

    ctx.actions.run(
        outputs = [out],
        inputs = modules + ctx.files.data + ctx.files.libraries + [
            ctx.file.package_init,
            ctx.file.readme,
            ctx.file.lock,
        ],
        executable = ctx.executable._builder,
        arguments = [args],
        mnemonic = "PluginWheel",
        progress_message = "Writing the {} wheel".format(name),
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

plugin_wheel = rule(
    implementation = _plugin_wheel_impl,
    attrs = {
        "data": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [PyInfo]),
        "dist_name": attr.string(mandatory = True),
        "libraries": attr.label_list(allow_files = [".so"]),
        "lock": attr.label(mandatory = True, allow_single_file = True),
        "package_init": attr.label(mandatory = True, allow_single_file = [".py"]),
        "packages": attr.string_list(mandatory = True),
        "readme": attr.label(mandatory = True, allow_single_file = [".md"]),
        "requires": attr.string_list(),
        "summary": attr.string(mandatory = True),
        "version": attr.string(mandatory = True),
        "_builder": attr.label(
            default = "//tools/wheel:build_wheel",
            executable = True,
            cfg = "exec",
        ),
    },
)
