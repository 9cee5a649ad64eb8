#!/bin/sh
# Puts together the root file system of the tollgate image in ROOT from a built `tollgate`
# binary: the binary as /usr/local/bin/tollgate, /bin/ratelimit linked to it (the path Envoy
# Gateway runs, as envoyproxy/ratelimit's image has it), the loader and the shared libraries
# `ldd` names, the CA certificates (for rediss:// and TLS to an xDS server), and passwd and
# group files naming the unprivileged user 65532 the image runs as.
#
#   sh deploy/image/rootfs.sh BINARY ROOT
#
# The Dockerfile's build stage runs it on the release binary; scripts/test.sh runs it on the
# binary it tested and builds the Dockerfile's final stage over the result.
set -eu

if [ "$#" -ne 2 ]; then
    echo "usage: rootfs.sh BINARY ROOT" >&2
    exit 2
fi
binary=$1
root=$2
certificates=/etc/ssl/certs/ca-certificates.crt

[ -x "$binary" ] || { echo "rootfs.sh: $binary: not an executable file" >&2; exit 1; }
[ -f "$certificates" ] || {
    echo "rootfs.sh: $certificates: missing (Debian package ca-certificates)" >&2
    exit 1
}
if [ -e "$root" ] && [ -n "$(ls -A "$root")" ]; then
    echo "rootfs.sh: $root: not empty" >&2
    exit 1
fi

mkdir -p "$root/usr/local/bin" "$root/bin" "$root/etc/ssl/certs" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$binary" "$root/usr/local/bin/tollgate"
chmod 0755 "$root/usr/local/bin/tollgate"
ln -s ../usr/local/bin/tollgate "$root/bin/ratelimit"

# The loader and every library the binary needs, each at the path it was found at. `ldd` prints
# `name => /path (address)` for a library and `/path (address)` for the loader.
libraries=$(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
[ -n "$libraries" ] || { echo "rootfs.sh: ldd $binary named no library" >&2; exit 1; }
for library in $libraries; do
    mkdir -p "$root$(dirname "$library")"
    cp -L "$library" "$root$library"
done

cp "$certificates" "$root$certificates"
printf 'root:x:0:0:root:/root:/sbin/nologin\ntollgate:x:65532:65532:tollgate:/nonexistent:/sbin/nologin\n' \
    > "$root/etc/passwd"
printf 'root:x:0:\ntollgate:x:65532:\n' > "$root/etc/group"
# Names from /etc/hosts first (Kubernetes writes the pod's own there), then DNS.
printf 'hosts: files dns\n' > "$root/etc/nsswitch.conf"
