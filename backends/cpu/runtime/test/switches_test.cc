// switches.h's readers on real environment variables: switch_number (unset, empty, in range, the
// range's ends, out of range, not a whole integer: the default and one stderr line naming the
// variable, its value and the range), switch_number_or_all ("all" and the numbers) and
// opted_in_reach. A plain program: exits 1 on the first failed check, naming it.
#include "backends/cpu/runtime/switches.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

using et_cpu_plugin::opted_in_reach;
using et_cpu_plugin::switch_number;
using et_cpu_plugin::switch_number_or_all;
using et_cpu_plugin::SwitchReach;

constexpr char kVariable[] = "ET_CPU_SWITCHES_TEST_NUMBER";
int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what.c_str());
    ++failures;
  }
}

// switch_number(kVariable, 7, 1, 100) (with `or_all`: switch_number_or_all(..., -1)) with
// `value` set (nullptr: unset), and what it wrote to stderr meanwhile.
int64_t read_number(const char* value, std::string* printed, bool or_all = false) {
  if (value == nullptr) {
    unsetenv(kVariable);
  } else {
    setenv(kVariable, value, 1);
  }
  std::fflush(stderr);
  std::FILE* capture = std::tmpfile();
  const int saved = dup(2);
  dup2(fileno(capture), 2);
  const int64_t result = or_all ? switch_number_or_all(kVariable, 7, 1, 100, -1)
                                : switch_number(kVariable, 7, 1, 100);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::rewind(capture);
  printed->clear();
  char buffer[256];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), capture)) > 0) printed->append(buffer, got);
  std::fclose(capture);
  return result;
}

void check_number(const char* value, int64_t expected, bool reported, bool or_all = false) {
  std::string printed;
  const int64_t got = read_number(value, &printed, or_all);
  const std::string what = std::string(or_all ? "switch_number_or_all" : "switch_number") +
                           " with " + (value ? value : "(unset)");
  check(got == expected, what + ": " + std::to_string(got) + ", expected " +
                             std::to_string(expected));
  if (!reported) {
    check(printed.empty(), what + ": printed \"" + printed + "\"");
    return;
  }
  for (const std::string& part : {std::string(kVariable), std::string(value),
                                  std::string("[1, 100]"), std::string("default 7")}) {
    check(printed.find(part) != std::string::npos,
          what + ": \"" + printed + "\" does not name " + part);
  }
  check(printed.find('\n') == printed.size() - 1, what + ": not one line: \"" + printed + "\"");
}

SwitchReach reach_of(const char* value) {
  if (value == nullptr) {
    unsetenv(kVariable);
  } else {
    setenv(kVariable, value, 1);
  }
  return opted_in_reach(kVariable);
}

}  // namespace

int main() {
  check_number(nullptr, 7, false);  // unset: the default, silently
  check_number("", 7, false);
  check_number("42", 42, false);
  check_number("1", 1, false);  // the range's ends
  check_number("100", 100, false);
  check_number("0", 7, true);  // out of range
  check_number("101", 7, true);
  check_number("-5", 7, true);
  check_number("99999999999999999999", 7, true);  // beyond int64
  check_number("abc", 7, true);  // not a whole integer
  check_number("12abc", 7, true);
  check_number("3.5", 7, true);
  check_number("all", -1, false, true);  // the word, then the numbers as switch_number reads them
  check_number(nullptr, 7, false, true);
  check_number("42", 42, false, true);
  check_number("0", 7, true, true);
  check_number("All", 7, true, true);
  check_number("all", 7, true);  // switch_number: not a number

  check(reach_of(nullptr) == SwitchReach::kNever, "opted_in_reach unset");
  check(reach_of("") == SwitchReach::kNever, "opted_in_reach empty");
  check(reach_of("0") == SwitchReach::kNever, "opted_in_reach 0");
  check(reach_of("1") == SwitchReach::kDefault, "opted_in_reach 1");
  check(reach_of("all") == SwitchReach::kEverywhere, "opted_in_reach all");
  unsetenv(kVariable);

  if (failures == 0) std::printf("switches_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
