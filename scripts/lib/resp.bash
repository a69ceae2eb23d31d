#!/usr/bin/env bash
# resp.bash [-h HOST] [-p PORT] ARG...: a minimal valkey-cli, for
# scripts/valkey-cluster-join.sh on a machine with neither valkey-cli nor
# redis-cli (`make tools` installs no client). One command over bash's
# /dev/tcp, its reply printed as valkey-cli prints it when not on a terminal:
# a string or integer as it is, an array one element a line, nil as an empty
# line. An error reply is printed too, and the exit status is 1.
set -euo pipefail
export LC_ALL=C # lengths in bytes
host=127.0.0.1
port=6379
while [ $# -gt 1 ]; do
  case $1 in
    -h) host=$2 ;;
    -p) port=$2 ;;
    *) break ;;
  esac
  shift 2
done
[ $# -gt 0 ] || { echo "usage: resp.bash [-h HOST] [-p PORT] ARG..." >&2; exit 2; }
exec 3<>"/dev/tcp/$host/$port"
request="*$#"$'\r\n'
for arg in "$@"; do
  request+="\$${#arg}"$'\r\n'"$arg"$'\r\n'
done
printf '%s' "$request" >&3

failed=0
# One reply from fd 3 (read byte-exact: `read` takes no more than it returns).
reply() {
  local line data i
  IFS= read -r -t 10 line <&3
  line=${line%$'\r'}
  case $line in
    [+:]*) printf '%s\n' "${line:1}" ;;
    -*) printf '%s\n' "${line:1}"; failed=1 ;;
    '$-1' | '*-1') echo ;;
    '$'*)
      data=""
      if [ "${line:1}" -gt 0 ]; then
        IFS= read -r -t 10 -N "${line:1}" data <&3
      fi
      IFS= read -r -t 10 -N 2 _ <&3 # the \r\n after the data
      printf '%s\n' "$data"
      ;;
    '*'*) for ((i = 0; i < ${line:1}; i++)); do reply; done ;;
    *) echo "resp.bash: unexpected reply: $line" >&2; exit 1 ;;
  esac
}
reply
exit "$failed"
