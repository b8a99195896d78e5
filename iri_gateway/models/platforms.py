"""CPU architecture names and OCI platforms: one spelling per machine.

The same machine goes by several names: the kernel's (`uname -m`: `x86_64`, `aarch64`) and
the container world's (OCI and Go: `amd64`, `arm64`). A profile written with one and a
flavour requirement written with the other must still meet, so every architecture name is
brought to the kernel's spelling here, and an image platform such as `linux/arm64/v8` is
parsed into its parts. A name this module does not know is refused with the closest known
ones, rather than compared as text and silently never matching.

This module imports nothing of the gateway: profiles, constraints and JobSpecs all use it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

_ALIASES: dict[str, tuple[str, ...]] = {
    "x86_64": ("amd64", "x86-64", "x64"),
    "aarch64": ("arm64", "armv8", "arm64v8"),
    "riscv64": ("riscv",),
    "ppc64le": ("ppc64el",),
    "s390x": (),
    "i386": ("386", "i686", "x86"),
    "armv7l": ("armv7", "armhf", "arm"),
    "armv6l": ("armv6", "armel"),
}
"""Each architecture's kernel name, and the other names it goes by (OCI, Go, Debian)."""

_CANONICAL: dict[str, str] = {
    alias: name for name, aliases in _ALIASES.items() for alias in (name, *aliases)
}
_ARM_VARIANTS = {"v6": "armv6l", "v7": "armv7l", "v8": "aarch64"}
PLATFORM_OSES = frozenset({"linux"})
"""Operating systems of the images a compute node runs (every resource's nodes are Linux)."""


def _any_case(word: str) -> str:
    """A regular expression of `word` in any case (JSON Schema patterns have no flags)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


def platform_pattern() -> str:
    """The JSON Schema pattern of the platforms `parse_platform` takes: a known OS and arch
    by any of their names, in any case, and perhaps a variant. Which variants an arch has
    (`arm/v7`, `arm64/v8`) is left to `parse_platform`."""
    oses = "|".join(_any_case(name) for name in sorted(PLATFORM_OSES))
    arches = "|".join(_any_case(name) for name in sorted(_CANONICAL, key=len, reverse=True))
    return f"^({oses})/({arches})(/[^/\\s]+)?$"


class PlatformError(ValueError):
    """An architecture or platform this gateway does not know; the message offers names."""


def known_architectures() -> list[str]:
    """Every architecture in its normal (kernel) spelling."""
    return list(_ALIASES)


def normalise_arch(name: str) -> str:
    """The kernel's name for an architecture (`arm64` -> `aarch64`); PlatformError if unknown."""
    key = name.strip().casefold()
    found = _CANONICAL.get(key)
    if found is None:
        closest = difflib.get_close_matches(key, list(_CANONICAL), n=3, cutoff=0.5)
        shown = [c if _CANONICAL[c] == c else f"{c} (= {_CANONICAL[c]})" for c in closest]
        hint = f"; closest: {', '.join(shown)}" if closest else ""
        raise PlatformError(
            f"unknown CPU architecture {name!r}; known: {', '.join(_ALIASES)} "
            f"(or their other names, e.g. amd64, arm64){hint}"
        )
    return found


def same_arch(left: str, right: str) -> bool:
    """True when both names are the same machine (`amd64` and `x86_64`)."""
    return normalise_arch(left) == normalise_arch(right)


@dataclass(frozen=True)
class Platform:
    """An OCI image platform, `os/arch[/variant]`, with the architecture normalised."""

    os: str
    arch: str
    variant: str | None
    written: str

    def __str__(self) -> str:
        return self.written


def parse_platform(text: str) -> Platform:
    """Parse `linux/arm64`, `linux/arm64/v8`, `linux/amd64`; PlatformError says why not."""
    parts = text.strip().split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise PlatformError(
            f"{text!r} is not a platform; write os/arch or os/arch/variant, e.g. linux/arm64"
        )
    os_name = parts[0].casefold()
    if os_name not in PLATFORM_OSES:
        raise PlatformError(
            f"{text!r}: compute nodes run {', '.join(sorted(PLATFORM_OSES))} images, "
            f"not {parts[0]!r}"
        )
    variant = parts[2].casefold() if len(parts) == 3 else None
    arch_name = parts[1].casefold()
    if arch_name == "arm" and variant is not None:
        arch = _ARM_VARIANTS.get(variant)
        if arch is None:
            raise PlatformError(f"{text!r}: unknown arm variant {parts[2]!r}; known: v6, v7")
    else:
        arch = normalise_arch(arch_name)
        if arch == "aarch64" and variant not in (None, "v8"):
            raise PlatformError(f"{text!r}: arm64 has only the variant v8")
    return Platform(os_name, arch, variant, text.strip())
