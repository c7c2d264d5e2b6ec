"""Read perflogs by the ``format`` a site's ReFrame configuration wrote them with.

Where no rule can guess a layout (spaces between fields, the value before its name, a time
in a site's own ``datefmt``), the site's configuration is the key: each perflog handler's
``format`` becomes a pattern whose ``%(attr)s`` placeholders are
named groups, and its ``datefmt`` reads the time. ``fabreg ingest --reframe-config FILE``
loads the handlers from a Python, YAML or JSON configuration as ReFrame writes them.

Supported: formats with one performance variable per line (``%(check_perf_var)s``,
``%(check_perf_value)s``, ...), as ReFrame 2.x/3.x wrote them and sites kept; formats with
``%(check_perfvalues)s`` write a header line, which the header reader already follows.
"""

from __future__ import annotations

import json
import re
import runpy
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml

from fabreg.review.headerless_perflog import INFO_AT, INFO_ON, RUN_ONLY_KEYS, HeaderlessLine

_PLACEHOLDER = re.compile(r"%\((?P<name>[^)]+)\)[-#0 +]*\d*(?:\.\d+)?[sdfgeEr]")
#: Placeholders whose values are numbers (matched tightly so a pattern cannot shift).
_NUMERIC = {"check_perf_value", "check_perf_ref", "check_perf_lower_thres",
            "check_perf_upper_thres", "check_job_completion_time_unix"}
#: Placeholder -> what it holds.
_ROLES = {
    "check_job_completion_time": "time", "asctime": "time",
    "check_job_completion_time_unix": "unix",
    "check_info": "info", "check_name": "name", "check_display_name": "name",
    "check_unique_name": "name", "check_short_name": "name",
    "check_system": "system", "check_partition": "partition", "check_environ": "environ",
    "check_jobid": "jobid", "check_job_nodelist": "nodelist",
    "check_perf_var": "perfvar", "check_perf_value": "value", "check_perf_unit": "unit",
    "check_perf_ref": "ref", "check_perf_lower_thres": "lower",
    "check_perf_upper_thres": "upper", "version": "version",
}


class FormatError(ValueError):
    """A configuration that holds no usable perflog format, said in one line."""


@dataclass
class SiteFormat:
    """One perflog handler's format as a line pattern."""

    format: str
    datefmt: str
    pattern: re.Pattern[str]
    names: dict[str, str]  # group name -> placeholder

    def parse(self, line: str, place: tuple[str, str]) -> HeaderlessLine | None:
        """The line's parts, or None when the line is not in this format."""
        match = self.pattern.match(line.rstrip("\r\n"))
        if match is None:
            return None
        got = {self.names[g]: v.strip() for g, v in match.groupdict().items() if v is not None}
        role = {_ROLES[k]: v for k, v in got.items() if k in _ROLES}
        if "value" not in role or "perfvar" not in role:
            return None
        time_text = role.get("unix") or self._iso(role.get("time", ""))
        test, system, partition, environ = (role.get("name", ""), role.get("system", ""),
                                            role.get("partition", ""), role.get("environ", ""))
        info = INFO_AT.match(role.get("info", "")) or INFO_ON.match(role.get("info", ""))
        if info:
            test = test or info.group("name")
            system = system or info.group("system")
            partition = partition or info.group("partition")
            environ = environ or info.group("environ")
        params = {k.removeprefix("check_"): v for k, v in got.items()
                  if k not in _ROLES and k.startswith("check_") and v
                  and k not in RUN_ONLY_KEYS and k.removeprefix("check_") not in RUN_ONLY_KEYS}
        return HeaderlessLine(
            time_text, test, system or place[0], partition or place[1], environ or "-",
            role["perfvar"], _float(role["value"]), role.get("unit", ""),
            _float(role.get("ref", "")), _float(role.get("lower", "")),
            _float(role.get("upper", "")), role.get("jobid", ""), role.get("nodelist", ""),
            params, {"version": role["version"]} if role.get("version") else {},
            f"the site's format {self.format!r}")

    def _iso(self, text: str) -> str:
        """The time as ISO 8601, read with the handler's datefmt (``%:z`` as ReFrame has it)."""
        if not self.datefmt or not text:
            return text
        fmt = self.datefmt.replace("%:z", "%z").replace("%F", "%Y-%m-%d").replace("%T",
                                                                                 "%H:%M:%S")
        try:
            stamp = datetime.strptime(text, fmt)
        except ValueError:
            return text  # the general reader says what is wrong with it
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=timezone.utc)
        return stamp.isoformat()


def _float(text: str) -> float | None:
    if text.strip().lower() in ("", "none", "null", "nan", "n/a"):
        return None
    return float(text)


#: strftime directives -> what they print, so a time with spaces cannot swallow a field.
_DATE_DIRECTIVES = {"Y": r"\d{4}", "m": r"\d\d", "d": r"\d\d", "H": r"\d\d",
                    "M": r"\d\d", "S": r"\d\d", "f": r"\d+", "y": r"\d\d",
                    "z": r"[+-]\d{4}", ":z": r"[+-]\d\d:\d\d", "F": r"\d{4}-\d\d-\d\d",
                    "T": r"\d\d:\d\d:\d\d", "b": r"[A-Za-z]{3}", "a": r"[A-Za-z]{3}",
                    "Z": r"[A-Za-z]*", "j": r"\d{3}", "e": r"[ \d]\d", "%": "%"}


def _time_pattern(datefmt: str) -> str:
    if not datefmt:
        return r"\S+"
    out, i = [], 0
    while i < len(datefmt):
        if datefmt[i] == "%" and i + 1 < len(datefmt):
            key = ":z" if datefmt[i + 1:i + 3] == ":z" else datefmt[i + 1]
            out.append(_DATE_DIRECTIVES.get(key, r".*?"))
            i += 1 + len(key)
        else:
            out.append(re.escape(datefmt[i]))
            i += 1
    return "".join(out)


def compile_format(fmt: str, datefmt: str = "") -> SiteFormat:
    """A handler's ``format`` -> its line pattern; FormatError if it logs no value per line."""
    if "%(check_perfvalues)s" in fmt or "%(check_#ALL)s" in fmt:
        raise FormatError("its format logs every variable in one line with a header line, "
                          "which ingest reads without the configuration")
    pieces, names, last = [], {}, 0
    for i, match in enumerate(_PLACEHOLDER.finditer(fmt)):
        pieces.append(re.escape(fmt[last:match.start()]))
        name = match.group("name")
        group = f"g{i}"
        names[group] = name
        if name in ("check_job_completion_time", "asctime"):
            pieces.append(rf"(?P<{group}>{_time_pattern(datefmt)})")
        elif name in _NUMERIC:
            pieces.append(rf"(?P<{group}>[^\s|,;]*?)")
        else:
            pieces.append(rf"(?P<{group}>.*?)")
        last = match.end()
    pieces.append(re.escape(fmt[last:]))
    if "check_perf_value" not in names.values() or "check_perf_var" not in names.values():
        raise FormatError("its format has no %(check_perf_var)s and %(check_perf_value)s")
    return SiteFormat(fmt, datefmt, re.compile("^" + "".join(pieces) + r"\s*$"), names)


def load_formats(path: Path) -> list[SiteFormat]:
    """The perflog handlers' formats of a ReFrame configuration (Python, YAML or JSON)."""
    try:
        if path.suffix == ".py":
            config = runpy.run_path(str(path)).get("site_configuration")
        elif path.suffix in (".yaml", ".yml"):
            config = yaml.safe_load(path.read_text())
        else:
            config = json.loads(path.read_text())
    except OSError as err:
        raise FormatError(f"{path}: cannot read ({err.strerror or err})") from None
    except Exception as err:  # a site's Python or YAML: any error is the file's
        raise FormatError(f"{path}: not a ReFrame configuration ({type(err).__name__}: "
                          f"{err})") from None
    if not isinstance(config, dict):
        raise FormatError(f"{path}: not a ReFrame configuration (no site_configuration)")
    formats, why = [], []
    for logging in config.get("logging") or []:
        for handler in (logging or {}).get("handlers_perflog") or []:
            fmt = (handler or {}).get("format")
            if not fmt:
                continue
            try:
                formats.append(compile_format(fmt, handler.get("datefmt", "") or ""))
            except FormatError as err:
                why.append(f"{fmt!r}: {err}")
    if not formats:
        detail = "; ".join(why) if why else "no perflog handler with a format"
        raise FormatError(f"{path}: no perflog format to read by ({detail})")
    return formats
