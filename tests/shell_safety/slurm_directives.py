"""What Slurm makes of the `#SBATCH` lines of a script, read as Slurm reads them.

Slurm reads the `#SBATCH` lines itself; `sbatch_words` follows sbatch's own parser
(`get_argument` and `_opt_batch_script` in src/sbatch/opt.c) and `slurm_output_file` the way
slurmstepd names output files (`fname_create` and `is_path_escaped` in
src/slurmd/slurmstepd/fname.c), so that directive values are checked as Slurm will read them.
"""

from __future__ import annotations

# --- what sbatch and slurmstepd make of the #SBATCH lines ------------------------------------

C_SPACE = b" \t\n\v\f\r"  # isspace() in the C locale: bytes, not unicode


def sbatch_words(script: str) -> list[str]:
    """The arguments sbatch reads from a script's #SBATCH lines, by sbatch's own parser.

    A line containing 'hetjob' or 'packjob' anywhere (any case, even inside quotes) starts a
    new heterogeneous-job component in sbatch; a job without roles never has one, so that
    fails here.
    """
    components = sbatch_components(script)
    assert len(components) == 1, f"sbatch reads {len(components)} het-job components"
    return components[0]


def sbatch_components(script: str) -> list[list[str]]:
    """The arguments of each heterogeneous-job component, by sbatch's own parser.

    Only the gateway's own separator line, exactly `#SBATCH hetjob`, may start a component (a
    cluster job has one per role); any other line containing 'hetjob' or 'packjob' fails.
    """
    components: list[list[str]] = [[]]
    for number, line in enumerate(script.encode("utf-8").split(b"\n"), 1):
        if line.startswith(b"#SBATCH"):
            rest = line[len(b"#SBATCH") :]
        elif line.startswith(b"#SLURM"):
            rest = line[len(b"#SLURM") :]
        else:
            stripped = line.lstrip(C_SPACE)
            if stripped and not stripped.startswith(b"#"):
                break  # sbatch stops at the first command
            continue
        if line == b"#SBATCH hetjob":
            components.append([])
            continue
        lowered = line.lower()
        assert b"hetjob" not in lowered and b"packjob" not in lowered, (
            f"line {number}: sbatch would start a heterogeneous-job component here: {line!r}"
        )
        components[-1] += [word.decode("utf-8") for word in _directive_arguments(rest, number)]
    return components


def _directive_arguments(line: bytes, number: int) -> list[bytes]:
    """get_argument(): quotes group, backslash escapes anything, unquoted '#' ends the line."""
    found: list[bytes] = []
    position, end = 0, len(line)
    while True:
        while position < end and line[position] in C_SPACE:
            position += 1
        if position < end and line[position : position + 1] == b":":
            raise AssertionError(f"line {number}: sbatch: unexpected ':' in {line!r}")
        if position >= end:
            return found
        word = bytearray()
        quote: int | None = None
        escaped = False
        while position < end and (quote is not None or line[position] not in C_SPACE):
            char = line[position]
            if escaped:
                escaped = False
            elif char == ord("\\"):
                escaped = True
                position += 1
                continue
            elif quote is not None:
                if char == quote:
                    quote = None
                    position += 1
                    continue
            elif char in (ord('"'), ord("'")):
                quote = char
                position += 1
                continue
            elif char == ord("#"):
                break
            word.append(char)
            position += 1
        assert quote is None, f"line {number}: sbatch: unmatched quote in {line!r}"
        if not word:
            return found  # an empty argument ends sbatch's scan of the line
        found.append(bytes(word))


def sbatch_options(script: str) -> dict[str, list[str]]:
    """#SBATCH options by name ('--job-name=x' -> {'job-name': ['x']})."""
    return _options_by_name(sbatch_words(script))


def sbatch_component_options(script: str) -> list[dict[str, list[str]]]:
    """#SBATCH options by name, one mapping per heterogeneous-job component."""
    return [_options_by_name(words) for words in sbatch_components(script)]


def _options_by_name(words: list[str]) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for word in words:
        assert word.startswith("--"), f"sbatch reads {word!r} as something other than an option"
        name, _, value = word[2:].partition("=")
        options.setdefault(name, []).append(value)
    return options


def slurm_output_file(pattern: str) -> str:
    """The file slurmstepd writes a batch job's --output/--error to (absolute patterns).

    fname_create(): a pattern holding any '\\' has its backslashes removed and no '%'
    replaced (is_path_escaped); otherwise '%%' is '%' and other '%x' are replaced.
    """
    if "\\" in pattern:
        return pattern.replace("\\", "")
    out, index = [], 0
    while index < len(pattern):
        if pattern[index] == "%":
            if pattern[index + 1 : index + 2] != "%":
                raise AssertionError(f"{pattern!r}: Slurm replaces {pattern[index : index + 2]!r}")
            index += 1
        out.append(pattern[index])
        index += 1
    return "".join(out)
