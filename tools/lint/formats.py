"""Output formats: text (default), JSON, SARIF 2.1.0 and GitHub workflow annotations."""

from __future__ import annotations

import json

from .evaluator import InputError
from .findings import RULE_DESCRIPTIONS, SYNTAX_ERROR, Finding, Location

FORMATS = ("text", "json", "sarif", "github")
TOOL_NAME = "target-lint"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _error_finding(error: InputError) -> Finding:
    return Finding(
        rule=SYNTAX_ERROR,
        message=error.message,
        location=Location(error.path, error.line, error.column),
    )


def render(fmt: str, findings: list[Finding], errors: list[InputError]) -> str:
    """The report in `fmt`; input errors are reported like findings of rule `syntax-error`."""
    everything = [_error_finding(e) for e in errors] + findings
    if fmt == "json":
        return _json(everything)
    if fmt == "sarif":
        return _sarif(everything)
    if fmt == "github":
        return "".join(_github(f) + "\n" for f in everything)
    return "".join(_text(f) + "\n" for f in everything)


def _text(finding: Finding) -> str:
    loc = finding.location
    suffix = "" if finding.rule == "duplicate-target" else f" [{finding.rule}]"
    return f"{loc.path}:{loc.line}:{loc.column}: {finding.message}{suffix}"


def _as_dict(finding: Finding) -> dict[str, object]:
    loc = finding.location
    out: dict[str, object] = {
        "rule": finding.rule,
        "path": loc.path,
        "line": loc.line,
        "column": loc.column,
        "message": finding.message,
    }
    if finding.name:
        out["name"] = finding.name
    if finding.package:
        out["package"] = finding.package
    if finding.first is not None:
        out["first"] = {"path": finding.first.path, "line": finding.first.line}
    if finding.chain:
        out["chain"] = list(finding.chain)
    return out


def _json(findings: list[Finding]) -> str:
    return json.dumps({"findings": [_as_dict(f) for f in findings]}, indent=2) + "\n"


def _physical(location: Location) -> dict[str, object]:
    return {
        "physicalLocation": {
            "artifactLocation": {"uri": location.path},
            "region": {"startLine": location.line, "startColumn": location.column},
        }
    }


def _sarif(findings: list[Finding]) -> str:
    rule_ids = sorted(RULE_DESCRIPTIONS)
    results = []
    for finding in findings:
        result: dict[str, object] = {
            "ruleId": finding.rule,
            "ruleIndex": rule_ids.index(finding.rule),
            "level": "error",
            "message": {"text": finding.message},
            "locations": [_physical(finding.location)],
        }
        if finding.first is not None:
            related = _physical(finding.first)
            related["id"] = 1
            related["message"] = {"text": "first registered here"}
            result["relatedLocations"] = [related]
        results.append(result)
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": TOOL_NAME,
                        "rules": [
                            {"id": r, "shortDescription": {"text": RULE_DESCRIPTIONS[r]}}
                            for r in rule_ids
                        ],
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _github(finding: Finding) -> str:
    loc = finding.location
    props = ",".join(
        [
            f"file={_escape_property(loc.path)}",
            f"line={loc.line}",
            f"col={loc.column}",
            f"title={_escape_property(finding.rule)}",
        ]
    )
    return f"::error {props}::{_escape_data(finding.message)}"
