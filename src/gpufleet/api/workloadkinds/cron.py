"""A CronJob's schedule: the five cron fields Kubernetes accepts, and the next time they name.

Kubernetes parses ``spec.schedule`` with the standard cron grammar: minute, hour, day of month, month, day of week;
``*``, ``?``, ranges ``a-b``, steps ``*/n`` and ``a-b/n``, lists, month and day names, and the macros ``@yearly``,
``@monthly``, ``@weekly``, ``@daily``, ``@hourly``. When both day fields are restricted a day matching either one
runs (as cron has always done); when one of them is ``*`` both must match. A time zone goes in ``spec.timeZone``,
never in the schedule (``TZ=`` is refused by the API server).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_MONTHS = {m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                                           "nov", "dec"))}
_DAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# name, lowest, highest, names
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}), ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS))
_HORIZON_DAYS = 366 * 5  # a schedule that names no day in five years never runs (31 February)


class CronError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Schedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day of month written as * or ?
    any_weekday: bool

    def day_matches(self, day: dt.date) -> bool:
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow


def _value(text: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    lowered = text.lower()
    if lowered in names:
        return names[lowered]
    if not text.isascii() or not text.isdigit() or len(text) > 2:
        raise CronError(f"{text!r} is not a {name}")
    value = int(text)
    if not low <= value <= high:
        raise CronError(f"{name} {value} is out of range ({low}-{high})")
    return value


def _field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> tuple[frozenset[int], bool]:
    values: set[int] = set()
    star = text.startswith(("*", "?"))
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isascii() or not step_text.isdigit() or not 0 < int(step_text) <= high:
                raise CronError(f"step {step_text!r} of the {name} is not a number from 1 to {high}")
            step = int(step_text)
        if base in ("*", "?"):
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _value(a, name, low, high, names), _value(b, name, low, high, names)
            if first > last:
                raise CronError(f"range {base!r} of the {name} runs backwards")
        else:
            first = _value(base, name, low, high, names)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return frozenset(values), star


def parse_schedule(text: str) -> Schedule:
    """The schedule ``text`` names; :class:`CronError` says what is wrong with it."""
    stripped = text.strip()
    if stripped.upper().startswith(("TZ=", "CRON_TZ=")):
        raise CronError("a time zone is not allowed in the schedule; set spec.timeZone")
    if stripped.startswith("@"):
        if stripped.lower() not in _MACROS:
            raise CronError(f"{stripped!r} is not one of {', '.join(sorted(_MACROS))}")
        stripped = _MACROS[stripped.lower()]
    parts = stripped.split()
    if len(parts) != 5:
        raise CronError(f"a schedule has 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}")
    fields = [_field(p, *spec) for p, spec in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in fields[4][0])  # 7 is Sunday too
    return Schedule(fields[0][0], fields[1][0], fields[2][0], fields[3][0], weekdays, fields[2][1], fields[4][1])


def zone(name: str | None) -> dt.tzinfo:
    """The time zone of ``spec.timeZone`` (UTC when unset); :class:`CronError` when no such zone exists."""
    if not name:
        return dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CronError(f"{name!r} is not a time zone of the IANA database") from exc


def next_run(schedule: Schedule, after: float, tz: dt.tzinfo = dt.UTC) -> float:
    """Seconds since the epoch of the first time the schedule names strictly after ``after``."""
    local = dt.datetime.fromtimestamp(after, tz).replace(second=0, microsecond=0, tzinfo=None)
    t = local + dt.timedelta(minutes=1)
    end = t + dt.timedelta(days=_HORIZON_DAYS)
    while t < end:
        if t.month not in schedule.months or not schedule.day_matches(t.date()):
            t = dt.datetime(t.year, t.month, t.day) + dt.timedelta(days=1)
            continue
        if t.hour not in schedule.hours:
            t = t.replace(minute=0) + dt.timedelta(hours=1)
            continue
        if t.minute not in schedule.minutes:
            t += dt.timedelta(minutes=1)
            continue
        return t.replace(tzinfo=tz).timestamp()
    raise CronError("the schedule names no time in the next five years")
