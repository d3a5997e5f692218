#!/usr/bin/env bash
# Throwaway certificates for the TLS tests, made fresh at each run with the
# openssl CLI (P-256 keys, valid for two days; never kept):
#
#   make_test_certs.sh DIR [IP ...]
#
# DIR/ca.pem, ca.key           the test CA
# DIR/server.pem, server.key   signed by it: localhost, 127.0.0.1 and each
#                              IP; serverAuth and clientAuth (what the
#                              coordinator and the workers of a group hold)
# DIR/client.pem, client.key   signed by it, clientAuth only (an API client)
# DIR/rogue-ca.pem             another CA, and rogue.pem, rogue.key, a
#                              certificate it signed like server.pem's: what
#                              a stranger could present
# DIR/expired.pem, expired.key signed by the test CA, expired in 2020
set -euo pipefail
dir="$1"
shift
mkdir -p "$dir"
cd "$dir"
san="DNS:localhost,IP:127.0.0.1"
for ip in "$@"; do san="$san,IP:$ip"; done

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {  # NAME
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -subj "/CN=octet test $1" \
    -days 2 -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() {  # NAME CA EXTENDED_KEY_USAGE
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=octet test $1"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
    "$3" "$san" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" \
    -CAcreateserial -days 2 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}

ca ca
leaf server ca serverAuth,clientAuth
leaf client ca clientAuth
ca rogue-ca
leaf rogue rogue-ca serverAuth,clientAuth

# An expired certificate: `openssl x509` takes no past dates, `openssl ca`
# does.
mkdir -p expired-db
: >expired-db/index.txt
echo 01 >expired-db/serial
cat >expired-ca.cnf <<'EOF'
[ca]
default_ca = test
[test]
database = expired-db/index.txt
serial = expired-db/serial
new_certs_dir = expired-db
default_md = sha256
policy = any
[any]
commonName = supplied
EOF
key expired.key
openssl req -new -key expired.key -out expired.csr -subj "/CN=octet test expired"
openssl ca -batch -config expired-ca.cnf -cert ca.pem -keyfile ca.key \
  -in expired.csr -out expired.pem -notext \
  -startdate 20200101000000Z -enddate 20200102000000Z 2>/dev/null
