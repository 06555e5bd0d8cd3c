# Shared buildifier flags of //:buildifier and //:buildifier_test (sourced).
# Bazel 4.2.3 has py_*, sh_* and cc_* as native rules, and loading them from rules_python,
# rules_shell or rules_cc's newer files would need downloads: those "native-*" warnings are off.
BUILDIFIER_WARNINGS="-warnings=-native-py,-native-sh-binary,-native-sh-test,-native-cc-binary,-native-cc-library,-native-cc-import,-native-cc-test,-native-cc-toolchain,-native-java-binary,-native-java-import,-native-java-library,-native-java-proto,-native-java-runtime,-native-java-toolchain,-native-proto,-native-cc-proto,-native-cc-objc-library"
