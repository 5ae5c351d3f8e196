"""Differential test: random command streams against floe-server and memcached side by side.

Both servers get the same seeded stream of text and meta commands over ~40 keys (so commands
collide on keys all the time), one connection each, and every reply is compared. CAS uniques
differ between servers by design, so each server's uniques are renamed in the order it first
shows them, and a `cas` / `C` sends each server its own unique. TTLs reported by `t` may differ
by one second; a counter's padding is ignored (see `normalize`), and so are an `mg`'s `h` and
`l` marks after an incr or decr until the key's next write (see `ARITHMETIC`). No eviction (small values, -m 256), no expiry during the run (TTLs of 0 or
thousands of seconds, or times memcached's 32-bit signed expiry wraps to those or to the
past), no delayed flush.

Stale-while-revalidate is compared too: `ms ... I` with each server's own older unique, `md ... I`,
`mg ... R` with recache times far from every TTL given (so the win does not depend on when the
servers' clocks tick), `mg ... N`. The meta flags `E` and `md ... x` came with memcached 1.6.27;
they are sent only when the reference memcached takes them (Debian 12's 1.6.18 does not; set
MEMCACHED to a newer build to test them), and `E` values are above every unique either server
generates, so comparisons of uniques come out alike.

    python3 differential.py [--seeds N] [--commands N]
"""

import argparse
import base64
import random
import re
import sys

from harness import Connection, server

KEYS = [f"k{i}" for i in range(40)]
# The unique sent for a key whose unique a server has not shown: no item has it on either
# server (memcached's first item has unique 1, which a `cas ... 1` would match there alone).
UNSEEN = 999999999


class Renamer:
    """Renames a server's CAS uniques to the order it first showed them."""

    def __init__(self):
        self.names = {}
        self.last = {}  # key -> the server's own last unique seen for it

    def name(self, unique):
        return self.names.setdefault(unique, len(self.names))

    def normalize(self, reply, keys_by_position=None):
        # A counter rewritten shorter is padded with spaces in place by memcached only when
        # no other request holds the item (an artifact of its reference counts); floe-server
        # always pads. Compare such values without the padding.
        reply = re.sub(
            rb"VALUE (\S+) (\d+) \d+( \d+)?\r\n(\d+) *\r\n",
            lambda m: b"VALUE " + m.group(1) + b" " + m.group(2) + b" n" + (m.group(3) or b"") + b"\r\n" + m.group(4) + b"\r\n",
            reply,
        )
        reply = re.sub(rb"VA \d+( [^\r]*)?\r\n(\d+) *\r\n", lambda m: b"VA n" + (m.group(1) or b"") + b"\r\n" + m.group(2) + b"\r\n", reply)
        lines = reply.split(b"\r\n")
        out = []
        skip = 0
        for line in lines:
            if skip:
                skip -= 1
                out.append(line)
                continue
            text = line.decode("latin-1")
            m = re.match(r"^VALUE (\S+) (\d+) (\S+) (\d+)$", text)
            if m:
                self.last[m.group(1)] = int(m.group(4))
                text = f"VALUE {m.group(1)} {m.group(2)} {m.group(3)} cas#{self.name(int(m.group(4)))}"
            elif text.startswith(("VA ", "HD", "EN", "NS", "EX", "NF")):
                parts = text.split(" ")
                for i, part in enumerate(parts):
                    if part.startswith("c") and part[1:].isdigit() and i > 0:
                        unique = int(part[1:])
                        parts[i] = f"c#{self.name(unique)}"
                        key = next((p[1:] for p in parts if p.startswith("k")), None)
                        if key is not None:
                            self.last[key] = unique
                    elif part.startswith("t") and (part[1:].isdigit() or part[1:] == "-1") and i > 0:
                        value = int(part[1:])
                        # Round TTLs to tens of seconds: the servers' clocks tick apart.
                        parts[i] = "t-1" if value == -1 else f"t~{(value + 5) // 10}"
                text = " ".join(parts)
            out.append(text.encode("latin-1"))
        return b"\r\n".join(out)


def value(rng):
    return "".join(rng.choice("abcdefghij") for _ in range(rng.randint(0, 12))).encode()


def chosen_cas(rng):
    """An `E` flag: a unique above any either server generates in a run."""
    return f"E{10**15 + rng.randrange(1000)}"


def command(rng, renamers, newer):
    """One random command for both servers: (bytes for floe, bytes for memcached). `newer`:
    the reference memcached takes `E` and `md ... x`."""
    key = rng.choice(KEYS)
    kind = rng.randrange(22)
    noreply = b" noreply" if rng.random() < 0.1 else b""
    flags = rng.choice([0, 1, 42, 4294967295])
    # Besides never and thousands of seconds: times that wrap in memcached's 32-bit signed
    # expiry, none of which expires during the run (2^31 and 2^63 - 1 are already past,
    # 2^32 never expires, 2^32 + 5000 is 5000 s).
    exptime = rng.choice([0, 0, 0, 5000, 100000, -1, 2147483648, 4294967296, 4294972296,
                          9223372036854775807])
    if kind < 4:
        keys = " ".join(rng.choice(KEYS) for _ in range(rng.randint(1, 5)))
        verb = rng.choice(["get", "gets"])
        both = f"{verb} {keys}\r\n".encode()
        return both, both
    if kind < 10:
        verb = rng.choice(["set", "set", "add", "replace", "append", "prepend"])
        data = value(rng)
        both = f"{verb} {key} {flags} {exptime} {len(data)}".encode() + noreply + b"\r\n" + data + b"\r\n"
        return both, both
    if kind == 10:
        data = value(rng)
        if rng.random() < 0.3:
            uniques = (999999999, 999999999)
        else:
            uniques = tuple(r.last.get(key, UNSEEN) for r in renamers)
        return tuple(
            f"cas {key} {flags} 0 {len(data)} {u}".encode() + noreply + b"\r\n" + data + b"\r\n" for u in uniques
        )
    if kind in (11, 12):
        verb = rng.choice(["incr", "decr"])
        delta = rng.choice([1, 7, 1000, 18446744073709551615, 18446744073709551600])
        if rng.random() < 0.3:
            # A counter to work on, sometimes near the wrap.
            number = rng.choice([b"0", b"9", b"10", b"18446744073709551610", b"99"])
            pre = f"set {key} 0 0 {len(number)}\r\n".encode() + number + b"\r\n"
        else:
            pre = b""
        both = pre + f"{verb} {key} {delta}".encode() + noreply + b"\r\n"
        return both, both
    if kind == 13:
        both = f"delete {key}".encode() + noreply + b"\r\n"
        return both, both
    if kind == 14:
        both = f"touch {key} {rng.choice([0, 5000])}".encode() + noreply + b"\r\n"
        return both, both
    if kind == 15:
        verb = rng.choice(["gat", "gats"])
        keys = " ".join(rng.choice(KEYS) for _ in range(rng.randint(1, 3)))
        both = f"{verb} {rng.choice([0, 5000])} {keys}\r\n".encode()
        return both, both
    if kind in (16, 17):
        mflags = rng.sample(["v", "c", "f", "t", "k", "s", "q", "Oab", "h"], rng.randint(0, 4))
        if rng.random() < 0.1:
            mflags.append(f"T{rng.choice([0, 5000])}")
        if rng.random() < 0.15:
            # TTLs are 0, 5000 or 100000: 30 s wins none, 10000 s the 5000 s ones.
            mflags.append(f"R{rng.choice([0, 30, 10000])}")
        if rng.random() < 0.1:
            mflags.append("N5000")
            if newer and rng.random() < 0.3:
                mflags.append(chosen_cas(rng))
        b64 = rng.random() < 0.1
        name = base64.b64encode(key.encode()).decode() if b64 else key
        if b64:
            mflags.append("b")
        both = f"mg {name} {' '.join(mflags)}".strip().encode() + b"\r\n"
        return both, both
    if kind == 18:
        data = value(rng)
        mflags = rng.sample(["c", "k", "q", "Oxy", f"F{flags}", f"T{exptime}"], rng.randint(0, 3))
        mode = rng.choice([None, "MS", "ME", "MR", "MA", "MP"])
        if mode:
            mflags.append(mode)
        if newer and rng.random() < 0.15:
            mflags.append(chosen_cas(rng))
        if rng.random() < 0.2:
            if rng.random() < 0.5:
                mflags.append("I")
            pair = []
            for r in renamers:
                pair.append(
                    f"ms {key} {len(data)} {' '.join(mflags + ['C' + str(r.last.get(key, UNSEEN))])}".encode()
                    + b"\r\n"
                    + data
                    + b"\r\n"
                )
            return tuple(pair)
        both = f"ms {key} {len(data)} {' '.join(mflags)}".strip().encode() + b"\r\n" + data + b"\r\n"
        return both, both
    if kind == 19:
        mflags = rng.sample(["q", "k", "Oz"], rng.randint(0, 2))
        if rng.random() < 0.3:
            mflags.append("I")
            if rng.random() < 0.5:
                mflags.append(f"T{rng.choice([0, 5000])}")
        if newer and rng.random() < 0.2:
            mflags += ["x", f"F{flags}"][: rng.randint(1, 2)]
            if rng.random() < 0.5 and "I" not in mflags:
                mflags.append(f"T{rng.choice([0, 5000])}")
        if newer and rng.random() < 0.15:
            mflags.append(chosen_cas(rng))
        both = f"md {key} {' '.join(mflags)}".strip().encode() + b"\r\n"
        return both, both
    if kind == 20:
        mflags = rng.sample(["v", "N0", "J13", "D3", "MD", "MI", "q", "k", "t", "c"], rng.randint(0, 4))
        if "MD" in mflags and "MI" in mflags:
            mflags.remove("MI")
        if newer and rng.random() < 0.15:
            mflags.append(chosen_cas(rng))
        if newer and "q" in mflags and "N0" in mflags:
            # A newer memcached hides a creation by `ma ... N q` too; 1.6.18 shows it, as
            # floe-server does.
            mflags.remove("q")
        both = f"ma {key} {' '.join(mflags)}".strip().encode() + b"\r\n"
        return both, both
    # (Not `mn`: the harness ends every request with one and reads up to it.)
    both = b"flush_all\r\n" if rng.random() < 0.05 else f"get {key}\r\n".encode()
    return both, both


# Writes after which memcached's `h` and `l` marks are not repeatable: an incr or decr (and
# `ma`) rewrites the value in place, keeping the item's marks, only when no other request of
# memcached's holds the item (its own threads take references now and then); otherwise it
# makes a new item without them. floe-server always rewrites in place. Until the key's next
# write, `mg` replies of it are compared with `h` and `l` masked.
ARITHMETIC = (b"incr", b"decr", b"ma")
REWRITES = (b"set", b"add", b"replace", b"append", b"prepend", b"cas", b"ms", b"md", b"delete")


def track_arithmetic(request, counted):
    """Update `counted`, the keys whose last write was arithmetic, after `request`."""
    for line in request.split(b"\r\n"):
        words = line.split()
        if not words:
            continue
        if words[0] == b"flush_all":
            counted.clear()
        elif len(words) > 1 and words[0] in ARITHMETIC:
            counted.add(words[1])
        elif len(words) > 1 and words[0] in REWRITES:
            counted.discard(words[1])


def mask_marks(request, reply, counted):
    """`reply` with `h` and `l` masked if `request` is an `mg` of a key in `counted`."""
    words = request.split(b"\r\n", 1)[0].split()
    if len(words) > 1 and words[0] == b"mg" and words[1] in counted:
        return re.sub(rb" ([hl])\d+", rb" \1?", reply)
    return reply


def run(seed, count):
    rng = random.Random(seed)
    with server("floe", threads=2, memory_mb=256) as floe_port, server("memcached", threads=2, memory_mb=256) as mc_port:
        floe, memcached = Connection(floe_port), Connection(mc_port)
        newer = not memcached.request(b"mg probe E1\r\n").startswith(b"CLIENT_ERROR")
        if seed == 1:
            print("reference memcached " + ("takes" if newer else "refuses") + " E and md x")
        renamers = (Renamer(), Renamer())
        history = []
        counted = set()
        for i in range(count):
            to_floe, to_memcached = command(rng, renamers, newer)
            got_floe = mask_marks(to_floe, renamers[0].normalize(floe.request(to_floe)), counted)
            got_memcached = mask_marks(
                to_memcached, renamers[1].normalize(memcached.request(to_memcached)), counted
            )
            track_arithmetic(to_floe, counted)
            history.append(to_floe)
            if got_floe != got_memcached:
                print(f"seed {seed}: command {i} differs", file=sys.stderr)
                for h in history[-8:-1]:
                    print(f"   > {h!r}", file=sys.stderr)
                print(f"this: {to_floe!r}" + (f" (memcached: {to_memcached!r})" if to_memcached != to_floe else ""), file=sys.stderr)
                print(f"floe-server: {got_floe!r}", file=sys.stderr)
                print(f"memcached:   {got_memcached!r}", file=sys.stderr)
                return False
        floe.close()
        memcached.close()
    print(f"seed {seed}: {count} commands, every reply equal")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--commands", type=int, default=4000)
    args = parser.parse_args()
    ok = all([run(seed, args.commands) for seed in range(1, args.seeds + 1)])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
