#!/usr/bin/env bash
# Tests deploy/install.sh into temporary DESTDIRs, never touching the real system: useradd,
# groupadd, usermod, systemd-sysusers and systemctl are replaced on PATH by stubs that record
# the call and fail. Also checks the example flagfile: it documents exactly the flags of
# daemon/main.cc, one comment line above each, and the installed daemon starts with it.
#
#   deploy/install_test.sh     # from a built tree (bazel build //daemon:kvoffloadd //client/ctl:kvoffloadctl)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "${here}")"
install="${here}/install.sh"
kvoffloadd="${KVOFFLOADD:-${repo}/bazel-bin/daemon/kvoffloadd}"
kvoffloadctl="${KVOFFLOADCTL:-${repo}/bazel-bin/client/ctl/kvoffloadctl}"

tmp="$(mktemp -d /tmp/kvo-install-test.XXXXXX)"
daemon_pid=""
cleanup() {
  if [[ -n "${daemon_pid}" ]]; then kill -KILL "${daemon_pid}" 2>/dev/null || true; fi
  rm -rf "${tmp}"
}
trap cleanup EXIT

failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
check() {  # check "description" command...
  local what="$1"; shift
  if "$@"; then pass "${what}"; else fail "${what}"; fi
}

for f in "${kvoffloadd}" "${kvoffloadctl}"; do
  [[ -x "${f}" ]] || { echo "install_test.sh: ${f} not built (bazel build //daemon:kvoffloadd //client/ctl:kvoffloadctl)" >&2; exit 1; }
done

# Stubs for everything that would change the real system.
mkdir -p "${tmp}/stubs"
for tool in useradd groupadd usermod systemd-sysusers systemctl; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/forbidden"\nexit 1\n' "${tool}" "${tmp}" >"${tmp}/stubs/${tool}"
  chmod +x "${tmp}/stubs/${tool}"
done
export PATH="${tmp}/stubs:${PATH}"
unset DESTDIR PREFIX

bins=(--kvoffloadd="${kvoffloadd}" --kvoffloadctl="${kvoffloadctl}")
mode() { stat -c %a "$1"; }

# 1. A DESTDIR install with the default prefix.
root="${tmp}/root"
if "${install}" --destdir="${root}" "${bins[@]}" >"${tmp}/out1" 2>&1; then pass "install into DESTDIR"; else
  cat "${tmp}/out1" >&2; fail "install into DESTDIR"; fi
check "kvoffloadd installed 0755" test "$(mode "${root}/usr/local/bin/kvoffloadd")" = 755
check "kvoffloadd is the built binary" cmp -s "${kvoffloadd}" "${root}/usr/local/bin/kvoffloadd"
check "kvoffloadctl installed 0755" test "$(mode "${root}/usr/local/bin/kvoffloadctl")" = 755
unit="${root}/etc/systemd/system/kvoffloadd.service"
check "unit installed 0644" test "$(mode "${unit}")" = 644
check "unit ExecStart" grep -qx 'ExecStart=/usr/local/bin/kvoffloadd --flagfile=/etc/kvoffload/kvoffloadd.flags' "${unit}"
check "unit otherwise as in deploy/" cmp -s "${here}/kvoffloadd.service" "${unit}"
check "flagfile installed 0644" test "$(mode "${root}/etc/kvoffload/kvoffloadd.flags")" = 644
check "flagfile is the example" cmp -s "${here}/kvoffloadd.flags" "${root}/etc/kvoffload/kvoffloadd.flags"
check "example flagfile installed" cmp -s "${here}/kvoffloadd.flags" "${root}/etc/kvoffload/kvoffloadd.flags.example"
check "sysusers.d file installed" grep -q '^u kvoffload ' "${root}/etc/sysusers.d/kvoffload.conf"
check "sysusers.d makes the admin group" grep -q '^g kvoffload-admin ' "${root}/etc/sysusers.d/kvoffload.conf"
check "sysusers.d puts the daemon in it" grep -qx 'm kvoffload kvoffload-admin' "${root}/etc/sysusers.d/kvoffload.conf"
check "unit joins the admin group" grep -qx 'SupplementaryGroups=kvoffload-admin' "${unit}"
check "flagfile names the socket groups" grep -qx -e '--admin_socket_group=kvoffload-admin' "${root}/etc/kvoffload/kvoffloadd.flags"
check "metrics doc installed" test -f "${root}/usr/local/share/doc/kvoffload/metrics.md"
check "unit keeps engines in the fd store" grep -qx 'FileDescriptorStoreMax=1024' "${unit}"
check "unit restarts on failure" grep -qx 'Restart=on-failure' "${unit}"
# FileDescriptorStorePreserve= only where systemd knows it (254+): a drop-in, installed by version.
preserve="${root}/etc/systemd/system/kvoffloadd.service.d/fdstore-preserve.conf"
systemd_version="$(systemd-analyze --version 2>/dev/null | awk 'NR == 1 { print $2 }' || true)"
if [[ "${systemd_version}" =~ ^[0-9]+$ && "${systemd_version}" -ge 254 ]]; then
  check "fdstore-preserve drop-in installed (systemd ${systemd_version})" cmp -s "${here}/fdstore-preserve.conf" "${preserve}"
else
  check "no fdstore-preserve drop-in (systemd ${systemd_version:-none} < 254)" test ! -e "${preserve}"
fi
check "no FileDescriptorStorePreserve= in the unit itself" bash -c '! grep -q "^FileDescriptorStorePreserve=" "$0"' "${unit}"
if "${install}" --destdir="${tmp}/root-preserve" --fdstore_preserve=yes "${bins[@]}" >/dev/null 2>&1; then
  pass "--fdstore_preserve=yes"; else fail "--fdstore_preserve=yes"; fi
check "--fdstore_preserve=yes installs the drop-in" cmp -s "${here}/fdstore-preserve.conf" \
  "${tmp}/root-preserve/etc/systemd/system/kvoffloadd.service.d/fdstore-preserve.conf"
if command -v systemd-analyze >/dev/null; then
  check "installed unit passes verify_unit.sh" "${here}/verify_unit.sh" --binary="${kvoffloadd}" "${unit}"
fi

# 2. Again over an edited flagfile: kept.
echo "--log_level=debug" >>"${root}/etc/kvoffload/kvoffloadd.flags"
if "${install}" --destdir="${root}" "${bins[@]}" >"${tmp}/out2" 2>&1; then pass "reinstall"; else
  cat "${tmp}/out2" >&2; fail "reinstall"; fi
check "edited flagfile kept" test "$(tail -n1 "${root}/etc/kvoffload/kvoffloadd.flags")" = "--log_level=debug"
check "reinstall says it kept the flagfile" grep -q "keeping the existing" "${tmp}/out2"

# 3. DESTDIR and PREFIX from the environment (packaging): /usr puts sysusers.d in /usr/lib.
root2="${tmp}/root2"
if DESTDIR="${root2}" PREFIX=/usr "${install}" "${bins[@]}" >"${tmp}/out3" 2>&1; then pass "DESTDIR/PREFIX from env"; else
  cat "${tmp}/out3" >&2; fail "DESTDIR/PREFIX from env"; fi
check "prefix /usr binary" test -x "${root2}/usr/bin/kvoffloadd"
check "prefix /usr ExecStart" grep -qx 'ExecStart=/usr/bin/kvoffloadd --flagfile=/etc/kvoffload/kvoffloadd.flags' "${root2}/etc/systemd/system/kvoffloadd.service"
check "prefix /usr Documentation" grep -qx 'Documentation=file:///usr/share/doc/kvoffload/metrics.md' "${root2}/etc/systemd/system/kvoffloadd.service"
check "prefix /usr sysusers.d in /usr/lib" test -f "${root2}/usr/lib/sysusers.d/kvoffload.conf"
if "${install}" --destdir="${tmp}/root3" --prefix=/opt/kvo "${bins[@]}" >/dev/null 2>&1; then
  pass "prefix /opt/kvo"; else fail "prefix /opt/kvo"; fi
check "prefix /opt/kvo ExecStart" grep -q '^ExecStart=/opt/kvo/bin/kvoffloadd ' "${tmp}/root3/etc/systemd/system/kvoffloadd.service"

# 4. --dry-run creates nothing, with or without DESTDIR.
if "${install}" --dry-run --destdir="${tmp}/dry" "${bins[@]}" >"${tmp}/out4" 2>&1; then pass "dry run"; else
  cat "${tmp}/out4" >&2; fail "dry run"; fi
check "dry run created nothing" test ! -e "${tmp}/dry"
check "dry run printed the installs" grep -q "^+ install -m 0755 .*/usr/local/bin/kvoffloadd$" "${tmp}/out4"
if "${install}" --dry-run "${bins[@]}" >"${tmp}/out5" 2>&1; then pass "dry run into /"; else
  cat "${tmp}/out5" >&2; fail "dry run into /"; fi
check "dry run into / printed the unit install" grep -q "^+ install -m 0644 .* /etc/systemd/system/kvoffloadd.service$" "${tmp}/out5"

# 5. Refusals.
if [[ $(id -u) -ne 0 ]]; then
  check "into / without root is refused" bash -c '! "$0" "${@}" >/dev/null 2>&1' "${install}" "${bins[@]}"
fi
check "unknown option is refused" bash -c '! "$0" --destdir="$1" --bogus >/dev/null 2>&1' "${install}" "${tmp}/bogus"
check "missing binary is refused" bash -c '! "$0" --destdir="$1" --kvoffloadd=/nonexistent >/dev/null 2>&1' "${install}" "${tmp}/bogus"
check "refusals created nothing" test ! -e "${tmp}/bogus"
check "nothing touched the system (stubs never called)" test ! -e "${tmp}/forbidden"
if [[ -e "${tmp}/forbidden" ]]; then cat "${tmp}/forbidden" >&2; fi

# 6. The flagfile documents exactly kvoffloadd's own flags (daemon/main.cc's and
# daemon/tier_flags.cc's), each under a comment line.
flags_file="${here}/kvoffloadd.flags"
main_flags="$({ "${kvoffloadd}" --helpfull 2>&1 || true; } |
               sed -n '/^  Flags from daemon\/\(main\|tier_flags\).cc:/,/^$/p' |
               sed -n 's/^    --\([a-z0-9_]*\) .*/\1/p' | sort)"
file_flags="$(sed -n 's/^--\([a-z0-9_]*\)=.*/\1/p' "${flags_file}" | sort)"
check "kvoffloadd --helpfull lists main.cc flags" test -n "${main_flags}"
if [[ "${main_flags}" == "${file_flags}" ]]; then pass "flagfile has every main.cc flag, once"; else
  fail "flagfile flags differ from daemon/main.cc: $(diff <(echo "${main_flags}") <(echo "${file_flags}") | grep '^[<>]' | tr '\n' ' ')"; fi
undocumented="$(awk '/^--/ && prev !~ /^#/ {print $0} {prev = $0}' "${flags_file}")"
check "every flag has a comment line above it" test -z "${undocumented}"
check "no other non-comment lines" test -z "$(grep -v '^#' "${flags_file}" | grep -v '^--' | grep -v '^$' || true)"

# 7. The installed daemon starts with the installed flagfile (overriding what needs a real node).
run_dir="${tmp}/run"
"${root}/usr/local/bin/kvoffloadd" --flagfile="${root}/etc/kvoffload/kvoffloadd.flags" \
  --runtime_dir="${run_dir}" --backend=host --max_region_bytes=64MiB \
  --metrics_address=127.0.0.1:0 --log_level=warn --socket_group= --admin_socket_group= \
  --admin_group= 2>"${tmp}/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do
  [[ -S "${run_dir}/kvoffload.sock" && -S "${run_dir}/admin.sock" ]] && break
  kill -0 "${daemon_pid}" 2>/dev/null || break
  sleep 0.1
done
check "daemon serves with the installed flagfile" test -S "${run_dir}/admin.sock"
check "sockets are 0660" test "$(mode "${run_dir}/kvoffload.sock")" = 660
check "kvoffloadctl health" "${root}/usr/local/bin/kvoffloadctl" --runtime_dir="${run_dir}" health
kill -TERM "${daemon_pid}" 2>/dev/null || true
daemon_rc=0
wait "${daemon_pid}" || daemon_rc=$?
daemon_pid=""
check "daemon exits 0 on SIGTERM" test "${daemon_rc}" -eq 0
if [[ ${failures} -ne 0 ]]; then cat "${tmp}/daemon.log" >&2; fi

if [[ ${failures} -ne 0 ]]; then
  echo "install_test.sh: ${failures} check(s) failed" >&2
  exit 1
fi
echo "install_test.sh: all checks passed"
