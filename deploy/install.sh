#!/usr/bin/env bash
# Installs kvoffloadd as a systemd service: the binaries, the unit, an example flagfile (never
# overwriting the node's own), the docs, and the kvoffload system user and group; then
# `systemctl daemon-reload`. It neither enables nor starts the service.
#
#   deploy/install.sh                           # as root, from a built tree (bazel build //...)
#   deploy/install.sh --dry-run                 # print what would be done, change nothing
#   deploy/install.sh --destdir=/tmp/pkgroot    # stage for a package: no user, no daemon-reload
#
# Options (DESTDIR and PREFIX may also come from the environment):
#   --prefix=DIR        binaries in DIR/bin, docs in DIR/share/doc/kvoffload (/usr/local)
#   --destdir=DIR       stage everything under DIR
#   --unitdir=DIR       where the unit goes (/etc/systemd/system)
#   --kvoffloadd=PATH   the daemon binary (bazel-bin/daemon/kvoffloadd)
#   --kvoffloadctl=PATH the admin CLI (bazel-bin/client/ctl/kvoffloadctl)
#   --client_lib=PATH   the engines' C ABI library (bazel-bin/client/libkvoffload_c.so), if built
#   --fdstore_preserve=auto|yes|no  install kvoffloadd.service.d/fdstore-preserve.conf
#                       (FileDescriptorStorePreserve=yes: the cache survives `systemctl stop`);
#                       auto: when this machine's systemd is 254 or newer (the key's first version)
#   --dry-run           print the commands instead of running them
#
# Installed: PREFIX/bin/{kvoffloadd,kvoffloadctl}, UNITDIR/kvoffloadd.service (ExecStart points at
# PREFIX/bin/kvoffloadd), /etc/kvoffload/kvoffloadd.flags (only when absent) and, always, the
# current example as /etc/kvoffload/kvoffloadd.flags.example, sysusers.d/kvoffload.conf (in
# /usr/lib for --prefix=/usr, else /etc), PREFIX/share/doc/kvoffload/metrics.md, and when built
# PREFIX/lib/libkvoffload_c.so with PREFIX/include/kvoffload/kvoffload_c.h.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "${here}")"
prefix="${PREFIX:-/usr/local}"
destdir="${DESTDIR:-}"
unitdir=/etc/systemd/system
sysconfdir=/etc/kvoffload
kvoffloadd="${repo}/bazel-bin/daemon/kvoffloadd"
kvoffloadctl="${repo}/bazel-bin/client/ctl/kvoffloadctl"
client_lib="${repo}/bazel-bin/client/libkvoffload_c.so"
fdstore_preserve=auto
dry_run=0

usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "install.sh: $*" >&2; exit 1; }

for arg in "$@"; do
  case "${arg}" in
    --prefix=*) prefix="${arg#*=}" ;;
    --destdir=*) destdir="${arg#*=}" ;;
    --unitdir=*) unitdir="${arg#*=}" ;;
    --kvoffloadd=*) kvoffloadd="${arg#*=}" ;;
    --kvoffloadctl=*) kvoffloadctl="${arg#*=}" ;;
    --client_lib=*) client_lib="${arg#*=}" ;;
    --fdstore_preserve=auto|--fdstore_preserve=yes|--fdstore_preserve=no) fdstore_preserve="${arg#*=}" ;;
    --dry-run) dry_run=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument ${arg}" ;;
  esac
done
[[ "${prefix}" == /* ]] || die "--prefix must be absolute, got ${prefix}"
[[ "${unitdir}" == /* ]] || die "--unitdir must be absolute, got ${unitdir}"
[[ -z "${destdir}" || "${destdir}" == /* ]] || destdir="$(pwd)/${destdir}"
destdir="${destdir%/}"
for f in "${kvoffloadd}" "${kvoffloadctl}"; do
  [[ -x "${f}" ]] || die "${f} is missing or not executable (bazel build //daemon:kvoffloadd //client/ctl:kvoffloadctl, or pass --kvoffloadd= / --kvoffloadctl=)"
done
for f in kvoffloadd.service kvoffloadd.flags kvoffload.sysusers.conf fdstore-preserve.conf; do
  [[ -f "${here}/${f}" ]] || die "${here}/${f} is missing"
done
if [[ -z "${destdir}" && ${dry_run} -eq 0 && $(id -u) -ne 0 ]]; then
  die "installing into / needs root (or use --destdir=DIR, or --dry-run)"
fi

# Runs a command, or prints it with --dry-run.
run() {
  if [[ ${dry_run} -eq 1 ]]; then
    printf '+'; printf ' %q' "$@"; printf '\n'
  else
    "$@"
  fi
}

# A package (prefix /usr) ships its sysusers.d file in /usr/lib; a local install keeps to /etc.
if [[ "${prefix}" == /usr ]]; then sysusersdir=/usr/lib/sysusers.d; else sysusersdir=/etc/sysusers.d; fi
bindir="${prefix}/bin"
docdir="${prefix}/share/doc/kvoffload"
echo "install.sh: installing kvoffloadd into ${destdir:-/} (prefix ${prefix})"

run install -d -m 0755 "${destdir}${bindir}" "${destdir}${unitdir}" "${destdir}${sysconfdir}" \
  "${destdir}${sysusersdir}" "${destdir}${docdir}"
run install -m 0755 "${kvoffloadd}" "${destdir}${bindir}/kvoffloadd"
run install -m 0755 "${kvoffloadctl}" "${destdir}${bindir}/kvoffloadctl"

# The unit names the installed binary: rewrite ExecStart for a non-default prefix.
unit_tmp="$(mktemp)"
trap 'rm -f "${unit_tmp}"' EXIT
sed "s#^ExecStart=/usr/local/bin/kvoffloadd#ExecStart=${bindir}/kvoffloadd#; s#file:///usr/local/share/doc/kvoffload/#file://${docdir}/#" \
  "${here}/kvoffloadd.service" >"${unit_tmp}"
run install -m 0644 "${unit_tmp}" "${destdir}${unitdir}/kvoffloadd.service"

# FileDescriptorStorePreserve= exists from systemd 254 on (version read from systemd-analyze, which
# never changes the system); an older systemd warns about it and
# ignores it, so it goes in a drop-in installed only where it means something.
if [[ "${fdstore_preserve}" == auto ]]; then
  systemd_version="$(systemd-analyze --version 2>/dev/null | awk 'NR == 1 { print $2 }' || true)"
  if [[ "${systemd_version}" =~ ^[0-9]+$ && "${systemd_version}" -ge 254 ]]; then
    fdstore_preserve=yes
  else
    fdstore_preserve=no
    echo "install.sh: systemd ${systemd_version:-not found} < 254: no FileDescriptorStorePreserve=;" \
         "restarts, upgrades and crashes keep the cache, 'systemctl stop' empties it"
  fi
fi
if [[ "${fdstore_preserve}" == yes ]]; then
  run install -d -m 0755 "${destdir}${unitdir}/kvoffloadd.service.d"
  run install -m 0644 "${here}/fdstore-preserve.conf" \
    "${destdir}${unitdir}/kvoffloadd.service.d/fdstore-preserve.conf"
fi

run install -m 0644 "${here}/kvoffloadd.flags" "${destdir}${sysconfdir}/kvoffloadd.flags.example"
if [[ -e "${destdir}${sysconfdir}/kvoffloadd.flags" ]]; then
  echo "install.sh: keeping the existing ${destdir}${sysconfdir}/kvoffloadd.flags (the new example is kvoffloadd.flags.example)"
else
  run install -m 0644 "${here}/kvoffloadd.flags" "${destdir}${sysconfdir}/kvoffloadd.flags"
fi
run install -m 0644 "${here}/kvoffload.sysusers.conf" "${destdir}${sysusersdir}/kvoffload.conf"
run install -m 0644 "${repo}/docs/metrics.md" "${destdir}${docdir}/metrics.md"
# The engines' side: the C ABI library and header (the Python package loads the library from
# PREFIX/lib); optional, as a node may only run the daemon.
if [[ -f "${client_lib}" ]]; then
  run install -d -m 0755 "${destdir}${prefix}/lib" "${destdir}${prefix}/include/kvoffload"
  run install -m 0755 "${client_lib}" "${destdir}${prefix}/lib/libkvoffload_c.so"
  run install -m 0644 "${repo}/client/kvoffload_c.h" "${destdir}${prefix}/include/kvoffload/kvoffload_c.h"
else
  echo "install.sh: no ${client_lib}; skipping the client library (bazel build //client:libkvoffload_c.so)"
fi

if [[ -n "${destdir}" ]]; then
  echo "install.sh: staged under ${destdir}; the package's postinst creates the user" \
       "(systemd-sysusers kvoffload.conf) and runs systemctl daemon-reload"
  exit 0
fi

# The system user and group (the sockets' group: engine users join it).
if getent passwd kvoffload >/dev/null; then
  echo "install.sh: user kvoffload exists"
elif command -v systemd-sysusers >/dev/null; then
  run systemd-sysusers "${sysusersdir}/kvoffload.conf"
else
  getent group kvoffload >/dev/null || run groupadd --system kvoffload
  run useradd --system --gid kvoffload --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin --comment "kvoffload KV-cache offload daemon" kvoffload
fi
# The admin socket's group (operators; --admin_socket_group, --admin_group); the daemon is in it
# so that it may give admin.sock that group.
if ! getent group kvoffload-admin >/dev/null; then
  if command -v systemd-sysusers >/dev/null; then
    run systemd-sysusers "${sysusersdir}/kvoffload.conf"
  else
    run groupadd --system kvoffload-admin
  fi
fi
if ! id -nG kvoffload 2>/dev/null | tr ' ' '\n' | grep -qx kvoffload-admin; then
  run usermod -aG kvoffload-admin kvoffload
fi

if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
  run systemctl daemon-reload
else
  echo "install.sh: systemd is not running here; skipped systemctl daemon-reload"
fi
cat <<EOM
install.sh: done. Next:
  edit ${sysconfdir}/kvoffloadd.flags (at least --max_region_bytes)
  usermod -aG kvoffload <each user that runs engines, e.g. vllm>   (then restart its service)
  usermod -aG kvoffload-admin <each operator that runs kvoffloadctl>
  systemctl enable --now kvoffloadd && systemctl status kvoffloadd
Optional, the disk tier (docs/disk_tier.md "Deploying"): dedicate a directory per NVMe device,
  e.g. an XFS or ext4 file system mounted at /var/lib/kvoffload/tier0 (the unit's StateDirectory),
  chown kvoffload:kvoffload it, and set --disk_tier_path and --disk_tier_bytes in the flagfile;
  a mount elsewhere also needs a drop-in: systemctl edit kvoffloadd -> ReadWritePaths=/mnt/nvme0/kvtier
EOM
