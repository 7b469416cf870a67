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

import json
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from grandbo.errors import InvalidInputError
from grandbo.names import service_name
from grandbo.values import identifiers, text_problem

MAX_ALIASES = 20


def alias_key(name: str) -> str:
    """How a service name or alias is compared: any case, spaces collapsed."""
    return " ".join(service_name(name).split())


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
    """An org's services and the undirected hop distances between them."""

    def __init__(self, services: Iterable[Service] = ()) -> None:
        self.services: dict[str, Service] = {service.name: service for service in services}
        self._neighbours: dict[str, set[str]] = {name: set() for name in self.services}
        for service in self.services.values():
            for dependency in service.depends_on:
                self._neighbours.setdefault(dependency, set()).add(service.name)
                self._neighbours[service.name].add(dependency)
        self._calls: dict[str, set[str]] = {name: set() for name in self._neighbours}  # directed, both ways
        self._called_by: dict[str, set[str]] = {name: set() for name in self._neighbours}
        for service in self.services.values():
            for dependency in service.depends_on:
                self._calls[service.name].add(dependency)
                self._called_by[dependency].add(service.name)
        self._distances: dict[str, dict[str, int]] = {}
        self._upstream: dict[str, dict[str, int]] = {}
        self._downstream: dict[str, dict[str, int]] = {}
        self._aliases = {alias_key(alias): s.name for s in self.services.values() for alias in s.aliases}
        self._names = sorted(self._neighbours)  # once: every re-ranked recall asks (a catalog of thousands)

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
        return {name: away for name, away in self._reach(service).items() if away <= hops}

    def upstream(self, service: str) -> dict[str, int]:
        """What `service` depends on at any depth, by the fewest hops along its dependencies, itself at 0; a cycle
        is walked once. An unknown service depends on nothing known: only itself."""
        return self._walk(service, self._calls, self._upstream)

    def downstream(self, service: str) -> dict[str, int]:
        """The services that depend on `service` at any depth (its callers, theirs...), by the fewest hops."""
        return self._walk(service, self._called_by, self._downstream)

    def _from(self, source: str) -> dict[str, int]:
        return self._walk(source, self._neighbours, self._distances)

    def _reach(self, source: str) -> dict[str, int]:
        """The hops from `source` to each service it reaches, itself at 0: an unknown service reaches itself only."""
        return self._from(source) if source in self._neighbours else {source: 0}

    @staticmethod
    def _walk(source: str, edges: Mapping[str, set[str]], cache: dict[str, dict[str, int]]) -> dict[str, int]:
        """Breadth first from `source` along `edges`: each service reached at its fewest hops (kept per source)."""
        found = cache.get(source)
        if found is None:
            found = {source: 0}
            queue = deque([source])
            while queue:
                current = queue.popleft()
                for nxt in edges.get(current, ()):
                    if nxt not in found:
                        found[nxt] = found[current] + 1
                        queue.append(nxt)
            cache[source] = found
        return found

    def closest(self, ours: Iterable[str], theirs: Iterable[str]) -> int | None:
        """The shortest distance between any service of one set and any of the other."""
        best: int | None = None
        theirs = list(theirs)
        for a in ours:
            reach = self._reach(a)  # once for every b, not through `distance` per pair
            for b in theirs:
                hops = reach.get(b)
                if hops is not None and (best is None or hops < best):
                    best = hops
        return best

    def mentioned_in(self, text: str) -> list[str]:
        """Catalog services named in a text, in catalog order (for topics that name their service)."""
        lowered = service_name(text)  # a name written as a look-alike in the topic is the name
        return [name for name in self.names if name in lowered]

    def to_dict(self) -> dict[str, Any]:
        return {"services": [service.model_dump(exclude_defaults=True) for service in self.services.values()]}


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
