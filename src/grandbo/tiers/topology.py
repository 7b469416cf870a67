"""Service topology: which services depend on which, and how far apart two services are.

A catalog is YAML or JSON:

    services:
      - name: auth-service
        depends_on: [redis-sessions, users-db]
        owners: [identity-team]
        aliases: ["Auth Service", "PAUTH01"]   # what paging vendors call it (PagerDuty's service name...)
        tier: 1
        escalation: "page #identity-oncall, then the EM"
      - name: redis-sessions

Dependencies are directed (auth-service calls redis-sessions); distance ignores direction, because a
fault travels both ways: an upstream caller suffers, a downstream dependency is the suspect. `upstream` follows
the direction: what a service depends on, directly or through others, at the fewest hops (where a change or an
alert that could have started its trouble is looked for); `downstream` is the other way (who feels it).
"""

from __future__ import annotations

import copy
import json
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from grandbo.errors import InvalidInputError
from grandbo.names import service_name
from grandbo.values import identifiers, text_problem

MAX_ALIASES = 20
# What walking the graph may cost. A walk reached every service of its part of the graph and was kept for good, one for
# each service asked about: over 10,000 services of 40 dependencies each a walk took 0.4-0.6 s and kept 200 KB, and a
# recall naming 50 services not asked about before walked 50 times (probe 28: four such loops of one org ran 115 s a
# recall, and held another org's recall p50 70 -> 466 ms, p90 102 -> 764 ms; the kept walks grew without end).
# Edges one walk looks along at most; the services past them count as not connected. In a catalog of 5 dependencies a
# service on average (its most, `catalog.DEPENDENCIES_A_SERVICE`) that is about four hops out: a memory there adds
# 0.06 of a service component at most to a re-ranked recall; grouping and related incidents look 2 and 3 hops out.
WALK_EDGES = 20_000
WALKS_KEPT = 200_000  # services one topology's kept walks hold at most, all together: the least recently used go first


def alias_key(name: str) -> str:
    """How a service name or alias is compared: any case, spaces collapsed."""
    return " ".join(service_name(name).split())


def _alias_keys(service: Service | None) -> set[str]:
    """A service's aliases as they are compared (`alias_key`); none of no service."""
    return {alias_key(alias) for alias in service.aliases} if service is not None else set()


def _depends(service: Service | None) -> int:
    return len(service.depends_on) if service is not None else 0


class Service(BaseModel):
    """One service of the catalog."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(min_length=1, max_length=128)
    depends_on: list[str] = Field(default_factory=list)
    owners: list[str] = Field(default_factory=list)
    tier: int | None = Field(default=None, ge=0, le=9)
    escalation: str = ""
    description: str = ""
    aliases: list[str] = Field(
        default_factory=list,
        max_length=MAX_ALIASES,
        description="Other names of the service, as paging vendors send them (`API Service`, a PagerDuty service "
        "id): an alert naming one is about this service. Any case; each names one service only.",
    )

    @field_validator("aliases")
    @classmethod
    def _aliases(cls, value: list[str]) -> list[str]:
        out: dict[str, str] = {}  # by its lower case: the first spelling given
        for alias in value:
            spoken = " ".join(alias.split())
            if not spoken or len(spoken) > 128 or text_problem(spoken):
                raise ValueError(f"an alias is 1 to 128 characters, not {alias!r}")
            out.setdefault(spoken.lower(), spoken)
        return list(out.values())

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return identifiers([service_name(value)], "service name")[0]

    @field_validator("depends_on")
    @classmethod
    def _depends(cls, value: list[str]) -> list[str]:
        return identifiers([service_name(v) for v in value], "dependency")


class Topology:
    """An org's services and the undirected hop distances between them. Never changed once made (requests walk it
    while another is made): a catalog change makes another from it (`changed`)."""

    def __init__(self, services: Iterable[Service] = ()) -> None:
        self.services: dict[str, Service] = {service.name: service for service in services}
        self._calls: dict[str, set[str]] = {name: set(s.depends_on) for name, s in self.services.items()}  # directed
        self._called_by: dict[str, set[str]] = {name: set() for name in self.services}  # ...the other way
        self._aliases: dict[str, str] = {}
        self._holders: Counter[str] = Counter()  # the services holding each alias: one, but for a catalog's parts
        for service in self.services.values():
            for dependency in service.depends_on:
                self._called_by.setdefault(dependency, set()).add(service.name)
            for key in _alias_keys(service):
                self._aliases[key] = service.name
                self._holders[key] += 1
        for name in self._called_by:
            self._calls.setdefault(name, set())  # a dependency the catalog names but holds no service of
        self._neighbours = {name: calls | self._called_by[name] for name, calls in self._calls.items()}
        self._walks = _Walks()
        self._names = sorted(self._neighbours)  # once: every re-ranked recall asks (a catalog of thousands)
        self.dependencies = sum(len(s.depends_on) for s in self.services.values())  # depends_on entries, in all
        self.built = len(self._neighbours)  # the services whose edges were made in making it: all, made whole

    def changed(self, written: Iterable[Service], gone: Iterable[str]) -> Topology:
        """This catalog with `written` services put (added or updated) and the services named `gone` dropped. Only
        the edges of the services a change touches are made again (those changed, what they called and call now:
        `built` counts them); the rest is shared with this topology, which stays as it was (a request may be walking
        it). Made whole after each change, 10,000 services of 5 dependencies took every process 0.1-0.4 s a change,
        and another org's recalls waited behind it (probe 28)."""
        written = list(written)
        services = dict(self.services)
        services.update((s.name, s) for s in written)
        for name in gone:
            services.pop(name, None)
        changes = {
            name: (before, after)
            for name in {*(s.name for s in written), *gone}
            if (before := self.services.get(name)) != (after := services.get(name))
        }
        calls, called_by, neighbours = dict(self._calls), dict(self._called_by), dict(self._neighbours)
        calling: dict[str, set[str]] = {}  # a touched service -> the changed services that call it now
        touched = set(changes)
        for name, (before, after) in changes.items():
            touched.update(before.depends_on if before is not None else ())
            for dependency in after.depends_on if after is not None else ():
                calling.setdefault(dependency, set()).add(name)
                touched.add(dependency)
        for name in touched:
            service = services.get(name)
            mine = set(service.depends_on) if service is not None else set()
            theirs = {caller for caller in called_by.get(name, ()) if caller not in changes} | calling.get(name, set())
            if service is None and not theirs:  # neither a service nor a dependency of one: out of the graph
                for edges in (calls, called_by, neighbours):
                    edges.pop(name, None)
            else:
                calls[name], called_by[name], neighbours[name] = mine, theirs, mine | theirs
        made = copy.copy(self)
        made.services, made._calls, made._called_by, made._neighbours = services, calls, called_by, neighbours
        made._walks = self._walks.kept_apart(touched)  # those that reached what changed are walked again
        if any(_alias_keys(before) != _alias_keys(after) for before, after in changes.values()):
            made._aliases, made._holders = self._aliases_after(services, changes.values())
        added = sorted(name for name in touched if name in neighbours and name not in self._neighbours)
        dropped = {name for name in touched if name in self._neighbours and name not in neighbours}
        if added or dropped:  # two sorted runs merged: one pass, not a sort
            made._names = sorted([*(name for name in self._names if name not in dropped), *added])
        made.dependencies += sum(_depends(after) - _depends(before) for before, after in changes.values())
        made.built = len(touched)
        return made

    def _aliases_after(
        self, services: Mapping[str, Service], changes: Iterable[tuple[Service | None, Service | None]]
    ) -> tuple[dict[str, str], Counter[str]]:
        """The alias map and its holders once `changes` (each a service before and after) are made: the aliases they
        name changed only, unless one of them is held by two services (a catalog written in parts may hold such):
        then made whole, as `__init__` makes it (the later service holds it)."""
        aliases, holders, named = dict(self._aliases), Counter(self._holders), set[str]()
        for before, after in changes:
            holders.subtract(_alias_keys(before))
            holders.update(_alias_keys(after))
            named.update(_alias_keys(before), _alias_keys(after))
        if any(holders[key] > 1 or self._holders[key] > 1 for key in named):
            return {key: s.name for s in services.values() for key in _alias_keys(s)}, +holders
        for key in named:
            aliases.pop(key, None)
        for _, after in changes:
            if after is not None:
                aliases.update(dict.fromkeys(_alias_keys(after), after.name))
        return aliases, +holders

    def __contains__(self, name: object) -> bool:
        return name in self._neighbours

    @property
    def names(self) -> list[str]:
        return self._names

    def canonical(self, name: str | None) -> str | None:
        """The catalog's name for `name` when it is one of a service's aliases (any case), else `name` as given."""
        if not name:
            return name
        return self._aliases.get(alias_key(name), name)

    def distance(self, a: str, b: str) -> int | None:
        """Hops between two services (0 for the same one), None when not connected or unknown."""
        return self._reach(a).get(b)

    def around(self, service: str, hops: int) -> dict[str, int]:
        """The services at most `hops` from `service` (`distance`), by hops, itself at 0: an unknown service is
        around itself only. What asking `distance` of every service would find, without asking each."""
        return self._reach(service, hops)  # no farther: grouping asks of every alert

    def upstream(self, service: str) -> dict[str, int]:
        """What `service` depends on at any depth, by the fewest hops along its dependencies, itself at 0; a cycle
        is walked once. An unknown service depends on nothing known: only itself."""
        return self._walk("up", (service,), self._calls)

    def downstream(self, service: str) -> dict[str, int]:
        """The services that depend on `service` at any depth (its callers, theirs...), by the fewest hops."""
        return self._walk("down", (service,), self._called_by)

    def _reach(self, source: str, hops: int | None = None) -> dict[str, int]:
        """The hops from `source` to each service it reaches (`hops` at most), itself at 0: an unknown service reaches
        itself only."""
        return self._walk("both", (source,), self._neighbours, hops) if source in self._neighbours else {source: 0}

    def _walk(
        self, kind: str, sources: tuple[str, ...], edges: Mapping[str, set[str]], hops: int | None = None
    ) -> dict[str, int]:
        """Breadth first from `sources` along `edges`, `hops` deep at most: each service reached at its fewest hops
        from the nearest source, until WALK_EDGES edges were looked along (kept, WALKS_KEPT services in all). A walk
        cut there keeps the hops it walked whole only: a service it did not reach is farther than all it did."""
        found = self._walks.get((kind, sources, hops))
        if found is None:
            found = dict.fromkeys(sources, 0)
            queue, looked = deque(sources), 0
            while queue and looked < WALK_EDGES:
                current = queue.popleft()
                if hops is not None and found[current] >= hops:
                    continue
                nexts = edges.get(current, ())
                looked += len(nexts)
                for nxt in nexts:
                    if nxt not in found:
                        found[nxt] = found[current] + 1
                        queue.append(nxt)
            if queue:  # cut: every service as far as the next one queued was reached (all nearer were walked from);
                # which farther ones were hung on a set's order, the hash seed: two processes ranked a question apart
                whole = found[queue[0]]
                found = {service: n for service, n in found.items() if n <= whole}
            self._walks.put((kind, sources, hops), found)
        return found

    def closest(self, ours: Iterable[str], theirs: Iterable[str]) -> int | None:
        """The shortest distance between any service of one set and any of the other."""
        ours = set(ours)
        theirs = list(theirs)
        if not theirs or not ours:
            return None
        if any(b in ours for b in theirs):  # a service of both: an unknown one is as near to itself as a known one
            return 0
        # One walk from all of ours at once, not one each: a question names up to 50 services
        known = tuple(sorted(a for a in ours if a in self._neighbours))
        reach = self._walk("both", known, self._neighbours) if known else {}
        found = [hops for b in theirs if (hops := reach.get(b)) is not None]
        return min(found) if found else None

    @property
    def walks_kept(self) -> int:
        """The services the kept walks hold, all together (at most WALKS_KEPT, but for one walk alone past it)."""
        return self._walks.held

    @property
    def walks_made(self) -> int:
        """The walks made since it was built (each kept, until let go), for one asked again is not made again."""
        return self._walks.made

    def mentioned_in(self, text: str) -> list[str]:
        """Catalog services named in a text, in catalog order (for topics that name their service)."""
        lowered = service_name(text)  # a name written as a look-alike in the topic is the name
        return [name for name in self.names if name in lowered]

    def to_dict(self) -> dict[str, Any]:
        return {"services": [service.model_dump(exclude_defaults=True) for service in self.services.values()]}


class _Walks:
    """Walks kept by what they walked from, the least recently used let go first once they hold more than WALKS_KEPT
    services in all. A topology is shared by its org's requests: one lock."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, tuple[str, ...], int | None], dict[str, int]] = OrderedDict()
        self.held = 0
        self.made = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, tuple[str, ...], int | None]) -> dict[str, int] | None:
        with self._lock:
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
            return found

    def kept_apart(self, touched: set[str]) -> _Walks:
        """The walks that reached none of the `touched` services (those whose edges a change made again), kept for the
        changed topology, the least recently used first as here. A walk is made of the edges of the services it walked
        from only, each of which it reached (a walk cut short keeps every service nearer than the next it would have
        walked from): one that reached no touched service looks along the same edges, in the same order, and finds
        the same. Dropped all after a change, every walk of the org was made again, 12-30 ms each (probe 28)."""
        kept = _Walks()
        with self._lock:
            walks = list(self._kept.items())
        for key, walk in walks:
            small, large = (walk, touched) if len(walk) < len(touched) else (touched, walk)
            if not any(name in large for name in small):
                kept._kept[key] = walk
                kept.held += len(walk)
        return kept

    def put(self, key: tuple[str, tuple[str, ...], int | None], walk: dict[str, int]) -> None:
        with self._lock:
            if key in self._kept:  # walked by another request meanwhile
                return
            self._kept[key] = walk
            self.held += len(walk)
            self.made += 1
            while self.held > WALKS_KEPT and len(self._kept) > 1:
                _, gone = self._kept.popitem(last=False)
                self.held -= len(gone)


def twice(services: Sequence[Service]) -> list[str]:
    """A problem for each service named more than once (the later one would overwrite the earlier), and for each
    alias that names two services or is another service's name (an alert naming it would be about either)."""
    # Counted and looked up in one pass: `names.count` of each name, and each alias sought in the list of names,
    # were quadratic: 1.8 s of a 5,000-service PUT, 14 s with an alias each (probe 25)
    names = Counter(service.name for service in services)
    problems = [f"service {name!r} appears twice" for name, n in sorted(names.items()) if n > 1]
    owner: dict[str, str] = {}
    for service in services:
        for alias in service.aliases:
            key = alias_key(alias)
            other = owner.setdefault(key, service.name)
            if other != service.name:
                problems.append(f"alias {alias!r} names both {other!r} and {service.name!r}")
            elif key in names and key != service.name:
                problems.append(f"alias {alias!r} of {service.name!r} is the name of another service")
    return problems


def parse_catalog(text: str) -> list[Service]:
    """Services from a YAML or JSON catalog; one clear error lists every problem."""
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as error:
        raise InvalidInputError(f"The catalog is not valid YAML or JSON: {error}", detail={}) from error
    return services_from(data)


def services_from(data: Any) -> list[Service]:
    items = data.get("services") if isinstance(data, Mapping) else data
    if not isinstance(items, list):
        raise InvalidInputError(
            "A catalog is {'services': [{'name': ..., 'depends_on': [...]}, ...]} (YAML or JSON).",
            detail={"got": type(data).__name__},
        )
    services: list[Service] = []
    problems: list[str] = []
    for position, item in enumerate(items):
        try:
            services.append(Service.model_validate(item))
        except ValidationError as error:
            problems.extend(f"services[{position}].{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
    problems.extend(twice(services))
    if problems:
        raise InvalidInputError("Invalid catalog: " + "; ".join(problems) + ".", detail={"problems": problems})
    return services


def dumps(services: Iterable[Service]) -> str:
    return json.dumps(Topology(services).to_dict(), sort_keys=True)
