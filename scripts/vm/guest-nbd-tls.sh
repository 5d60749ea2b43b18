#!/bin/sh
# In the guest: `pmkit serve --tls require` under the kernel's NBD client with TLS
# (nbd-client -x, its CA file and host name): certificates made with certtool, ext4 made,
# written, read back over TLS; a client without TLS is refused.
#   scripts/vm/guest-nbd-tls.sh DEVICE_FILE
set -eu
. scripts/vm/guest-lib.sh
dev=$1 sock=/tmp/pmkit-nbd-tls.sock mnt=/mnt/nbd-tls pki=/tmp/pki
mkdir -p "$pki/server"
certtool --generate-privkey --key-type=ecdsa --outfile "$pki/ca-key.pem" 2>/dev/null
printf 'cn = pmkit guest CA\nca\ncert_signing_key\nexpiration_days = 2\n' > "$pki/ca.info"
certtool --generate-self-signed --load-privkey "$pki/ca-key.pem" --template "$pki/ca.info" \
    --outfile "$pki/server/ca-cert.pem" 2>/dev/null
certtool --generate-privkey --key-type=ecdsa --outfile "$pki/server/server-key.pem" 2>/dev/null
printf 'cn = localhost\ndns_name = localhost\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 2\n' > "$pki/server.info"
certtool --generate-certificate --load-privkey "$pki/server/server-key.pem" \
    --load-ca-certificate "$pki/server/ca-cert.pem" --load-ca-privkey "$pki/ca-key.pem" \
    --template "$pki/server.info" --outfile "$pki/server/server-cert.pem" 2>/dev/null
modprobe nbd
serve_on "$sock" "$dev" --tls require --tls-certificates "$pki/server"
# Without TLS the server refuses (require).
if nbd-client -unix "$sock" /dev/nbd1 -b 4096 > /tmp/plain.log 2>&1; then
    nbd-client -d /dev/nbd1 || true
    echo "guest-nbd-tls.sh: a client without TLS was served"; exit 1
fi
echo "plain client refused: $(grep -v -i -e oldstyle -e "newstyle protocol" /tmp/plain.log | tail -1)"
nbd-client -unix "$sock" /dev/nbd0 -b 4096 -x -A "$pki/server/ca-cert.pem" -H localhost
mkfs.ext4 -q -F /dev/nbd0
mkdir -p "$mnt"
mount /dev/nbd0 "$mnt"
head -c 3000000 /dev/urandom > /tmp/tls-data
cp /tmp/tls-data "$mnt/data"
umount "$mnt"
mount /dev/nbd0 "$mnt"
cmp /tmp/tls-data "$mnt/data"
umount "$mnt"
nbd-client -d /dev/nbd0
kill "$pid"
wait "$pid" 2>/dev/null || true
echo "guest-nbd-tls.sh: ext4 over pmkit serve with TLS (nbd-client -x): written, remounted, equal; plain client refused"
