#!/usr/bin/env python3
"""scripts/doc_check.py — the checks behind scripts/doc-check; the documentation, executed.

    python3 scripts/doc_check.py try-it   --repo DIR
    python3 scripts/doc_check.py flags    --repo DIR --bin DIR
    python3 scripts/doc_check.py snippets --repo DIR --build core=DIR [--build hummingbird=DIR] ...

try-it    runs every shell block of README.md's "Try it" section as written, one command (a
          line, with its `\\` continuations) at a time, in a scratch directory that mirrors the
          repository (its directories real, its files symbolic links), as one reader's shell
          session: variables and `cd` carry over from command to command, and from block to
          block (the Chromium block asks the h3serve the first block started). Each command
          has a time limit; a non-zero exit or a timeout fails it, and the session goes on, so
          one run reports every failing command. A command ending in `&` is started in the
          background and waited for until it has bound the ports its line names (`--port N`,
          and "TCP N" or "UDP N" in its comment); every background command is killed, with its
          children (its session), when the section ends. A `<printed SHA-256>` placeholder is
          replaced by the last SHA-256 (64 hex digits) a background command printed. `swift`
          is a shell function that runs SwiftPM on the repository's package for the directory
          the command is in, with the build folder scripts/test uses (SCRATCH_PATH as there),
          so the README's builds reuse CI's.
flags     checks each tool's `--help` (and its subcommands') against its *Command-line tools*
          article: every option printed is named there (by its short or its long name), and
          every flag the article gives the tool exists.
snippets  compiles every ```swift block of README.md and the DocC articles. A block whose first
          line is a comment starting with `// fragment` is left out. The blocks of one article
          are compiled together, each in a scope nested in the one before (so a block sees the
          names earlier ones declared and may declare them anew), inside one async throwing
          function whose parameters are the names the article uses without declaring them
          (GIVENS below). The unit is compiled to an object file against the modules of a
          build SwiftPM made, with the compiler arguments it used for one of that build's
          targets; `#sourceLocation` makes errors point at the Markdown lines. A block that
          imports Hummingbird or Vapor starts a unit compiled against that integration's
          example build; blocks after it in the article continue that unit.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS_ARTICLES = {
    "Sources/QuicTransport/QuicTransport.docc/CommandLineTools.md": ["quic-echo", "quic-netem"],
    "Sources/H3/H3.docc/CommandLineTools.md": ["h3get", "h3serve", "h3load"],
}

# What an article's snippets take from the reader's own code, as Rust's doctests hide lines:
# imports beyond the catalog's own module (which every block of a catalog sees, as a doctest
# sees its crate), and the names it uses without declaring them, the parameters of the function
# its blocks are compiled in.
CATALOG_MODULE = {"Sources/QuicTransport/QuicTransport.docc/": "QuicTransport", "Sources/H3/H3.docc/": "H3"}
GIVENS = {
    "Sources/QuicTransport/QuicTransport.docc/GettingStarted.md":
        (["Foundation"], "fingerprint: String, descriptor: NWMultiplexGroup, queue: DispatchQueue"),
    "Sources/QuicTransport/QuicTransport.docc/PortingFromNetworkFramework.md":
        (["Foundation"], "endpoint: NWEndpoint, pinned: Data, request: Data, queue: DispatchQueue"),
    "Sources/QuicTransport/QuicTransport.docc/QlogAndReports.md": ([], "group: NWConnectionGroup"),
    "Sources/QuicTransport/QuicTransport.docc/StructuredConcurrency.md":
        (["Foundation"], "connection: NetworkConnection<QUIC>"),
    "Sources/H3/H3.docc/GettingStarted.md": ([], "consume: ([UInt8]) -> Void"),
    "Sources/H3/H3.docc/QlogAndReports.md": (["HTTPTypes"], "client: HTTP3Client, request: HTTPRequest"),
    "Sources/H3/H3.docc/ServingHTTP3.md":
        (["Foundation", "HTTPTypes"],
         "chainPEM: String, keyPEM: String, "
         "upload: @escaping @Sendable (HTTP3ServerRequest) async throws -> HTTP3ServerResponse"),
    # An article's blocks for one integration ("ARTICLE KIND") see only that build's modules.
    "Sources/H3/H3.docc/ServingWebFrameworks.md hummingbird": (["NIOSSL"], "tls: TLSConfiguration"),
    "Sources/H3/H3.docc/ServingWebFrameworks.md vapor": (["Vapor"], "app: Application"),
}

# Which build compiles a unit, by the modules its blocks import (the rest: "core"), and the
# target of that build whose compiler arguments (module maps, search paths) the unit borrows.
FRAMEWORKS = [("hummingbird", re.compile(r"^\s*import\s+Hummingbird")),
              ("vapor", re.compile(r"^\s*import\s+(Vapor|VaporHTTP3)\b"))]
# The first of a kind's targets that the build's description.json has (the examples' folders
# hold the integration's build too, and the last package built there writes the file).
BORROWED_TARGETS = {"core": ["h3get"], "hummingbird": ["TodosApp"], "vapor": ["VaporTodosApp", "VaporHTTP3"]}

FENCE = re.compile(r"^(\s*)```(\S*)[ \t]*(.*)$")
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][A-Za-z0-9-]*)")


def say(message):
    print(f"doc-check: {message}", flush=True)


def code_blocks(path):
    """Yields (language, first line number of the content, [lines]) for each fenced block."""
    lines = Path(path).read_text().split("\n")
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match:
            indent = len(match.group(1))
            end = index + 1
            while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
                end += 1
            body = [line[indent:] if line[:indent].strip() == "" else line for line in lines[index + 1:end]]
            yield match.group(2), index + 2, body
            index = end
        index += 1


# --- snippets -------------------------------------------------------------------------

def is_fragment(body):
    first = next((line for line in body if line.strip()), "")
    return re.match(r"^\s*//\s*fragment\b", first, re.IGNORECASE) is not None


def snippet_units(repo):
    """[(article, kind, [(line, body)])]: the Swift blocks of each document, grouped."""
    documents = ["README.md"] + sorted(
        str(path.relative_to(repo)) for path in repo.glob("Sources/*/*.docc/*.md"))
    units, fragments = [], 0
    for document in documents:
        current = None
        for language, line, body in code_blocks(repo / document):
            if language != "swift":
                continue
            if is_fragment(body):
                fragments += 1
                continue
            kind = next((name for name, pattern in FRAMEWORKS
                         if any(pattern.match(text) for text in body)), None)
            if current is None or (kind is not None and kind != current[1]):
                current = (document, kind or "core", [])
                units.append(current)
            current[2].append((line, body))
    return units, fragments


def unit_source(repo, document, kind, blocks, index):
    imports = []
    for _, body in blocks:
        for text in body:
            if re.match(r"^\s*import\s+\w+", text) and text.strip() not in imports:
                imports.append(text.strip())
    given_imports, parameters = GIVENS.get(f"{document} {kind}", GIVENS.get(document, ([], "")))
    module = next((name for folder, name in CATALOG_MODULE.items() if document.startswith(folder)), None)
    for name in ([module] if module else []) + given_imports:
        if f"import {name}" not in imports:
            imports.append(f"import {name}")
    out = [f"// Generated by scripts/doc_check.py from {document}."]
    out += imports
    out.append(f"func snippets{index}({parameters}) async throws {{")
    for line, body in blocks:
        out.append("do {")
        out.append(f'#sourceLocation(file: "{document}", line: {line})')
        out += ["" if re.match(r"^\s*import\s+\w+", text) else text for text in body]
        out.append("#sourceLocation()")
    out += ["}" for _ in blocks]
    out.append("}")
    return "\n".join(out) + "\n"


def borrowed_arguments(build_dir, targets):
    """The compiler arguments SwiftPM used in build_dir (its description.json) for the first
    of `targets` it built."""
    description = Path(build_dir) / "description.json"
    if not description.exists():
        return None
    commands = json.loads(description.read_text())["swiftCommands"]
    command = next((c for target in targets for key, c in commands.items()
                    if c.get("moduleName") == target and not key.endswith("-tool.module")), None)
    if command is None:
        return None
    keep, skip_next = [], 0
    arguments = command["otherArguments"]
    dropped_with_value = {"-index-store-path", "-module-cache-path", "-package-name", "-j"}
    for position, argument in enumerate(arguments):
        if skip_next:
            skip_next -= 1
            continue
        if argument == "-Xcc":
            keep += arguments[position:position + 2]
            skip_next = 1
            continue
        if argument == "-enable-upcoming-feature":  # the package's choice, not a reader's
            skip_next = 1
            continue
        if argument in dropped_with_value:
            skip_next = 1
            continue
        if argument == "-Xfrontend" and position + 1 < len(arguments) and \
                arguments[position + 1] == "-entry-point-function-name":
            skip_next = 3
            continue
        if argument in ("-incremental", "-enable-batch-mode", "-serialize-diagnostics",
                        "-parseable-output", "-enable-testing", "-g") or argument.startswith("-j"):
            continue
        keep.append(argument)
    return ["-I", command["importPath"]] + keep


def check_snippets(repo, builds):
    units, fragments = snippet_units(repo)
    failures = 0
    work = Path(tempfile.mkdtemp(prefix="doc-check-snippets."))
    blocks = 0
    for index, (document, kind, unit_blocks) in enumerate(units):
        blocks += len(unit_blocks)
        where = f"{document}:{unit_blocks[0][0]}"
        if kind not in builds:
            say(f"FAILED {where}: its blocks need the {kind} build; pass --build {kind}=DIR "
                f"(scripts/test builds it in step 4b)")
            failures += 1
            continue
        arguments = borrowed_arguments(builds[kind], BORROWED_TARGETS[kind])
        if arguments is None:
            say(f"FAILED {where}: no compile command for {' or '.join(BORROWED_TARGETS[kind])} in "
                f"{builds[kind]}/description.json; build that package first")
            failures += 1
            continue
        source = work / f"Snippets{index}.swift"
        source.write_text(unit_source(repo, document, kind, unit_blocks, index))
        result = subprocess.run(
            ["swiftc", "-c", *arguments, "-module-cache-path", str(work / "cache"),
             "-suppress-warnings", str(source), "-o", str(source.with_suffix(".o"))],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            failures += 1
            errors = [line for line in result.stdout.splitlines() if ": error: " in line]
            for line in (errors or result.stdout.splitlines())[:20]:
                print(f"  {line}")
            say(f"FAILED {document}: {len(unit_blocks)} block(s) from line {unit_blocks[0][0]} "
                f"do not compile ({kind} build)")
        else:
            say(f"ok {document}: {len(unit_blocks)} block(s) from line {unit_blocks[0][0]} compile ({kind})")
    shutil.rmtree(work, ignore_errors=True)
    say(f"snippets: {blocks} Swift blocks in {len(units)} units, {fragments} fragments left out, "
        f"{failures} units failed")
    return failures == 0


# --- flags ------------------------------------------------------------------------------

def help_options(binary, words=()):
    """[(names, where)] from `binary [words] --help` and its subcommands' help: one entry per
    option line, its short and long names together (`-k, --insecure`)."""
    output = subprocess.run([binary, *words, "--help"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=30).stdout
    options, section, subcommands = [], None, []
    for line in output.splitlines():
        if re.match(r"^[A-Z][A-Z ]+:", line):
            section = line.split(":")[0]
            continue
        if section == "OPTIONS" and re.match(r"^  -", line):
            names = re.split(r"\s{2,}", line.strip())[0]
            options.append((frozenset(FLAG.findall(re.sub(r"<[^>]*>", "", names))),
                            " ".join((Path(binary).name, *words))))
        if section == "SUBCOMMANDS":
            match = re.match(r"^  ([a-z][\w-]*)\s", line + " ")
            if match and match.group(1) != "help":
                subcommands.append(match.group(1))
    for subcommand in subcommands:
        options += help_options(binary, (*words, subcommand))
    return options


def article_mentions(path, tools):
    """{tool: {flag: [line]}}: the flags the article gives each tool, from its code.

    Code is inline `code` and fenced blocks' lines. Code that starts with a tool's name gives
    that tool its flags (a block's line starting with a flag or `[` continues the line before);
    code that starts with a flag gives them to the tool whose `### tool` section it is in;
    code that starts with any other word (another command, output) gives none."""
    mentions = {tool: {} for tool in tools}
    section_tool = None
    in_block = False
    previous_command = None
    for number, line in enumerate(Path(path).read_text().split("\n"), start=1):
        if re.match(r"^\s*```", line):
            in_block = not in_block
            previous_command = None
            continue
        if not in_block:
            heading = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
            if heading:
                section_tool = heading.group(1) if heading.group(1) in tools else None
                continue
            pieces = re.findall(r"`([^`]+)`", line)
        else:
            pieces = [line]
        for piece in pieces:
            command = None if not in_block else previous_command
            for part in re.split(r"(?<!\\)\|(?!\|)", piece):
                words = part.strip().lstrip("$[ ").split()
                if not words:
                    continue
                if words[0].startswith("-"):
                    owner = command if command is not None else section_tool
                else:
                    command = words[0] if words[0] in tools else ""
                    owner = command
                if owner:
                    for flag in FLAG.findall(part):
                        mentions[owner].setdefault(flag, []).append(number)
            if in_block:
                previous_command = command
    return mentions


def check_flags(repo, bin_dir):
    failures = 0
    for article, tools in TOOLS_ARTICLES.items():
        mentions = article_mentions(repo / article, tools)
        for tool in tools:
            binary = Path(bin_dir) / tool
            if not binary.exists():
                say(f"FAILED {tool}: {binary} does not exist (swift build -c release builds it)")
                failures += 1
                continue
            options = help_options(str(binary))
            offered = set().union(*(names for names, _ in options))
            named = dict(mentions[tool])
            # -vv is -v twice; a cluster of the tool's short flags names each of them.
            for flag in list(named):
                if re.fullmatch(r"-[A-Za-z]{2,}", flag) and all(f"-{c}" in offered for c in flag[1:]):
                    for c in flag[1:]:
                        named.setdefault(f"-{c}", []).extend(named[flag])
                    del named[flag]
            undocumented = {}
            for names, where in options:
                if names & {"-h", "--help", "--version"} or names & named.keys():
                    continue
                undocumented.setdefault(" ".join(sorted(names, key=len)), []).append(where)
            for names, where in sorted(undocumented.items()):
                say(f"FAILED {article}: `{', '.join(dict.fromkeys(where))} --help` prints {names}, "
                    f"the article does not name it")
                failures += 1
            for flag in sorted(named):
                if flag not in offered:
                    lines = ", ".join(str(n) for n in sorted(set(named[flag])))
                    say(f"FAILED {article}:{lines}: names {flag} for {tool}, which has no such flag")
                    failures += 1
            say(f"flags {tool}: {len(options)} options in --help, {len(named)} flags named in {article}")
    return failures == 0


# --- try-it -------------------------------------------------------------------------------

def section_blocks(readme, heading):
    """The ```sh blocks of the README section under `## heading`: [(first line, [lines])]."""
    text = Path(readme).read_text().split("\n")
    start = next(i for i, line in enumerate(text) if line.strip() == f"## {heading}")
    end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
    blocks = []
    for language, line, body in code_blocks(readme):
        if start < line - 1 < end and language in ("sh", "bash", "shell"):
            blocks.append((line, body))
    return blocks


def commands(first_line, body):
    """Logical commands: (line number, text), a trailing backslash joining the next line."""
    out, pending, pending_line = [], "", None
    for offset, text in enumerate(body):
        if pending_line is None:
            pending_line = first_line + offset
        pending += text + "\n"
        if text.rstrip().endswith("\\"):
            continue
        if pending.strip() and not pending.strip().startswith("#"):
            out.append((pending_line, pending.rstrip("\n")))
        pending, pending_line = "", None
    return out


def strip_comment(command):
    """The command without a trailing shell comment (a `#` after whitespace, outside quotes)."""
    quote = None
    for index, char in enumerate(command):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or command[index - 1].isspace()):
            return command[:index].rstrip(), command[index + 1:].strip()
    return command, ""


def named_ports(command):
    """[(protocol or None, port)] that a background command's line says it listens on: its
    `--port N`, and "TCP N" or "UDP N" in its comment."""
    code, comment = strip_comment(command)
    ports = [(None, int(port)) for port in re.findall(r"--port[ =](\d+)", code)]
    ports += [(proto.lower(), int(port)) for proto, port in re.findall(r"\b(TCP|UDP) (\d{2,5})\b", comment)]
    named = {port for proto, port in ports if proto}
    return sorted({(proto, port) for proto, port in ports if proto or port not in named}, key=str)


def bound_ports():
    """{(protocol, port)} bound in this network namespace (TCP listening, UDP any)."""
    bound = set()
    for proto in ("tcp", "udp"):
        for suffix in ("", "6"):
            try:
                rows = Path(f"/proc/net/{proto}{suffix}").read_text().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                fields = row.split()
                if proto == "tcp" and fields[3] != "0A":
                    continue
                bound.add((proto, int(fields[1].split(":")[1], 16)))
    return bound


SWIFT_FUNCTION = r'''
# doc-check: SwiftPM on the repository's package for the directory this command is in, with
# the build folder scripts/test uses for it.
swift() {
  case "${1:-}" in build|run|test|package) ;; *) command swift "$@"; return ;; esac
  local subcommand="$1"; shift
  local here; here="$(pwd -P)"
  local relative="${here#"$DOC_CHECK_SCRATCH"}"; relative="${relative#/}"
  local package="$DOC_CHECK_REPO${relative:+/$relative}"
  [[ -f "$package/Package.swift" ]] || { echo "doc-check: no Package.swift at $package" >&2; return 1; }
  local arguments=(--package-path "$package")
  if [[ -n "${SCRATCH_PATH:-}" ]]; then
    if [[ -z "$relative" ]]; then arguments+=(--scratch-path "$SCRATCH_PATH")
    else arguments+=(--scratch-path "$SCRATCH_PATH-$(basename "$relative")"); fi
  fi
  command swift "$subcommand" "${arguments[@]}" "$@"
}
'''


def mirror(repo, scratch):
    """The repository's tracked directories, real, with links to its tracked files."""
    files = subprocess.run(["git", "-C", str(repo), "ls-files"], stdout=subprocess.PIPE,
                           text=True, check=True).stdout.splitlines()
    for name in files:
        target = scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.symlink_to(repo / name)


def kill_tree(pid):
    """SIGTERM, then SIGKILL, to the process group (session) a command was started in."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def show_tail(log, lines=15):
    tail = [text for text in Path(log).read_text(errors="replace").splitlines() if text.strip()][-lines:]
    if tail:
        print("\n".join(f"  | {text}" for text in tail), flush=True)


def wait_until_bound(command, process, deadline):
    """None once the ports a background command's line names are bound, else why not."""
    ports = named_ports(command)
    while True:
        bound = bound_ports()
        missing = [(proto, port) for proto, port in ports
                   if not ((proto or "tcp", port) in bound or (proto is None and ("udp", port) in bound))]
        if not missing:
            return None
        alive = subprocess.run(["ps", "-o", "pid=", "-s", str(process.pid)],
                               stdout=subprocess.PIPE, text=True).stdout.split()
        if not alive or time.monotonic() > deadline:
            names = ", ".join(f"{proto or 'TCP or UDP'} {port}" for proto, port in missing)
            return f"{'exited' if not alive else 'timed out'} before binding {names}"
        time.sleep(0.2)


def check_try_it(repo, limit, swift_limit):
    """Runs the section as one reader's session; every command runs, and each failure counts."""
    readme = repo / "README.md"
    blocks = section_blocks(readme, "Try it")
    if not blocks:
        say("FAILED README.md has no shell blocks under '## Try it'")
        return False
    scratch = Path(tempfile.mkdtemp(prefix="doc-check-try-it.")).resolve()
    mirror(repo, scratch)
    logs = Path(str(scratch) + ".logs")
    logs.mkdir()
    rc_file = logs / "swift-function.sh"
    rc_file.write_text(SWIFT_FUNCTION)
    env = dict(os.environ, DOC_CHECK_SCRATCH=str(scratch), DOC_CHECK_REPO=str(repo))
    cwd = str(scratch)
    background = []          # (pid, log)
    failures = 0
    all_commands = [command for first_line, body in blocks for command in commands(first_line, body)]
    say(f"try-it: {len(all_commands)} commands from README.md's 'Try it', in {scratch}")
    try:
        for line, command in all_commands:
            shown = " ".join(command.split())
            code, _ = strip_comment(command)
            in_background = code.rstrip().endswith("&")
            seconds = swift_limit if re.search(r"(^|[;&|(\s])swift\s", code) else limit
            if "<printed" in code:
                printed = "".join(Path(log).read_text(errors="replace") for _, log in background)
                digests = re.findall(r"\b[0-9a-fA-F]{64}\b", printed)
                if not digests:
                    say(f"FAILED README.md:{line}: no background command printed a SHA-256 for its "
                        f"<printed …> placeholder: {shown}")
                    failures += 1
                    continue
                code = re.sub(r"<printed [^>]*>", digests[-1], code)
            log = logs / f"line-{line}.log"
            script = (f'source "{rc_file}"\nset -a\n{code}\n__doc_check_status=$?\n'
                      f'env -0 > "{log}.env"; pwd -P > "{log}.cwd"\nexit $__doc_check_status\n')
            started = time.monotonic()
            with open(log, "w") as output:
                process = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=output,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True)
            if in_background:
                background.append((process.pid, log))
            try:
                status = process.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                kill_tree(process.pid)
                show_tail(log)
                say(f"FAILED README.md:{line}: timed out after {seconds} s: {shown}")
                failures += 1
                continue
            if Path(f"{log}.env").exists():
                env = dict(entry.split("=", 1) for entry in
                           Path(f"{log}.env").read_text().split("\0") if "=" in entry)
                cwd = Path(f"{log}.cwd").read_text().strip()
            if status != 0:
                show_tail(log)
                hint = " (a command was not found: bash scripts/setup installs what the README runs)" \
                    if status == 127 else ""
                say(f"FAILED README.md:{line}: exit status {status}{hint}: {shown}")
                failures += 1
                continue
            if in_background:
                why = wait_until_bound(command, process, started + seconds)
                if why:
                    show_tail(log)
                    say(f"FAILED README.md:{line}: the background command {why}: {shown}")
                    failures += 1
                    continue
            kind = "background, listening" if in_background else "exit 0"
            say(f"ok README.md:{line} ({kind} after {time.monotonic() - started:.1f} s): {shown}")
    finally:
        for pid, _ in background:
            kill_tree(pid)
    say(f"try-it: {len(all_commands)} commands, {failures} failed")
    if failures:
        say(f"try-it: the scratch directory is kept in {scratch}, each command's output in {logs}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
    return failures == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("check", choices=["try-it", "flags", "snippets"])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--bin", help="the release build's bin path, for flags")
    parser.add_argument("--build", action="append", default=[],
                        help="KIND=DIR: a build folder (bin path) for snippets; KIND is core, "
                             "hummingbird or vapor")
    parser.add_argument("--limit", type=int, default=120, help="seconds per command (try-it)")
    parser.add_argument("--swift-limit", type=int, default=1800,
                        help="seconds per command that runs swift (try-it)")
    arguments = parser.parse_args()
    repo = arguments.repo.resolve()
    if arguments.check == "try-it":
        ok = check_try_it(repo, arguments.limit, arguments.swift_limit)
    elif arguments.check == "flags":
        ok = check_flags(repo, arguments.bin)
    else:
        builds = dict(entry.split("=", 1) for entry in arguments.build)
        ok = check_snippets(repo, builds)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
