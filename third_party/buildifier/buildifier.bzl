"""Repository rule: buildifier from the npm registry, checksum-pinned.

npm's `@bazel/buildifier` package ships the real buildifier binaries. The rule fetches the pinned
package with `npm pack` (the npm registry is reachable here, arbitrary URLs are not), checks the
package and the chosen binary against pinned sha256 sums, and exposes the binary as
`@buildifier//:buildifier`.
"""

def _buildifier_impl(rctx):
    arch = rctx.execute(["uname", "-m"]).stdout.strip()
    platform = {"x86_64": "linux_amd64", "aarch64": "linux_arm64"}.get(arch)
    if not platform or platform not in rctx.attr.binary_sha256:
        fail("buildifier: no pinned binary for machine architecture '{}'".format(arch))

    package = "@bazel/buildifier@" + rctx.attr.version
    result = rctx.execute(["npm", "pack", "--silent", package], timeout = 600)
    if result.return_code != 0:
        fail("buildifier: `npm pack {}` failed: {}".format(package, result.stderr))
    tarball = result.stdout.strip().splitlines()[-1]
    _check_sha256(rctx, tarball, rctx.attr.package_sha256)

    # tar, not rctx.extract: Debian 13's bazel-bootstrap (4.2.3+ds-11) crashes extracting a .tgz
    # (NoClassDefFoundError: org/apache/commons/io/Charsets); a zip would not, npm packs tgz only.
    untar = rctx.execute(["tar", "-xzf", tarball, "--strip-components=1", "package/"])
    if untar.return_code != 0:
        fail("buildifier: extracting {} failed: {}".format(tarball, untar.stderr))
    binary = "buildifier-" + platform
    _check_sha256(rctx, binary, rctx.attr.binary_sha256[platform])
    rctx.execute(["chmod", "+x", binary])
    rctx.symlink(binary, "buildifier")
    rctx.delete(tarball)
    rctx.file("WORKSPACE", "workspace(name = \"{}\")\n".format(rctx.name))
    rctx.file("BUILD.bazel", """exports_files(["buildifier"], visibility = ["//visibility:public"])\n""")

def _check_sha256(rctx, path, expected):
    actual = rctx.execute(["sha256sum", path]).stdout.split(" ")[0]
    if actual != expected:
        fail("buildifier: sha256 of {} is {}, expected {}".format(path, actual, expected))

buildifier_binary = repository_rule(
    implementation = _buildifier_impl,
    attrs = {
        "binary_sha256": attr.string_dict(mandatory = True),
        "package_sha256": attr.string(mandatory = True),
        "version": attr.string(mandatory = True),
    },
)
