#!/usr/bin/env bash
# Checks deploy/kvoffloadd.service with `systemd-analyze verify`, failing on any error or
# warning about the unit. verify insists that ExecStart's binary exists, so the unit is checked
# as a copy in a temporary directory with ExecStart pointing at a binary that does.
#
#   deploy/verify_unit.sh                      # bazel-bin/daemon/kvoffloadd, else /bin/true
#   deploy/verify_unit.sh --binary=PATH [UNIT]
#
# Exit status: 0 clean, 1 errors or warnings (printed), 2 usage or missing systemd-analyze.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
unit="${here}/kvoffloadd.service"
binary=""
for arg in "$@"; do
  case "${arg}" in
    --binary=*) binary="${arg#--binary=}" ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    -*) echo "verify_unit.sh: unknown option ${arg}" >&2; exit 2 ;;
    *) unit="${arg}" ;;
  esac
done
if ! command -v systemd-analyze >/dev/null; then
  echo "verify_unit.sh: systemd-analyze not found (apt-get install systemd)" >&2
  exit 2
fi
if [[ ! -f "${unit}" ]]; then
  echo "verify_unit.sh: no unit file ${unit}" >&2
  exit 2
fi
if [[ -z "${binary}" ]]; then
  binary="${here}/../bazel-bin/daemon/kvoffloadd"
  [[ -x "${binary}" ]] || binary=/bin/true
fi
binary="$(realpath "${binary}")"
[[ -x "${binary}" ]] || { echo "verify_unit.sh: ${binary} is not executable" >&2; exit 2; }

name="$(basename "${unit}")"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
grep -q '^ExecStart=/usr/local/bin/kvoffloadd\( \|$\)' "${unit}" || {
  echo "verify_unit.sh: ${unit} has no ExecStart=/usr/local/bin/kvoffloadd line" >&2
  exit 1
}
sed "s#^ExecStart=/usr/local/bin/kvoffloadd#ExecStart=${binary}#" "${unit}" >"${tmp}/${name}"

status=0
output="$(cd "${tmp}" && SYSTEMD_LOG_COLOR=0 systemd-analyze verify "./${name}" 2>&1)" || status=$?
# Lines about other units of this machine are not ours; any line naming the unit is a finding.
findings="$(grep -F "${name}" <<<"${output}" || true)"
if [[ ${status} -ne 0 || -n "${findings}" ]]; then
  echo "verify_unit.sh: systemd-analyze verify ${name} (exit ${status}):" >&2
  echo "${output}" >&2
  exit 1
fi
if [[ -n "${output}" ]]; then
  echo "verify_unit.sh: notes from systemd-analyze about other units (ignored):" >&2
  echo "${output}" >&2
fi
echo "verify_unit.sh: ${name} OK ($(systemd-analyze --version | head -n1))"
