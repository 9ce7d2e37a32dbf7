#!/usr/bin/env bash
# Runs every test (unit tests and the compat-tests with real clients) on a fresh Debian machine:
# installs what is missing (kcat, Kerberos (a KDC, kinit, libkrb5-dev, Cyrus SASL's GSSAPI plugin), Node.js,
# ZooKeeper and a JRE, Go and Sarama, openssl, iproute2, nftables, chromium and chromium-driver from Debian,
# a Python venv with the test extras, kafkajs from npm), then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# ZooKeeper (and a JRE to run it) for the replicated-cluster tests.
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
[ -e /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
# Go and Sarama's sources (GOPATH build; gcc for cgo, which Sarama's zstd codec needs) for the Sarama tests;
# gcc also builds kafkacompat's C accelerator (kafkacompat/wire/_validate.c) at pip install.
command -v go >/dev/null 2>&1 || missing+=(golang-go)
[ -e /usr/share/gocode/src/github.com/Shopify/sarama/sarama.go ] || missing+=(golang-github-shopify-sarama-dev)
# kafka-go 0.2 (CreateTopics v0, message sets) for compat-tests/test_kafka_go.py.
[ -e /usr/share/gocode/src/github.com/segmentio/kafka-go/conn.go ] || missing+=(golang-github-segmentio-kafka-go-dev)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
# the openssl command line makes the TLS tests' certificates (kafkacompat/testing/certs.py).
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# Java's keytool makes the JKS and PKCS12 stores a Kafka user has (kafkacompat/testing/certs.py).
command -v keytool >/dev/null 2>&1 || missing+=(default-jre-headless)
# iproute2 and nftables for the network-partition tests (hosts in network namespaces, run as root).
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
# Chromium and its WebDriver for the console tests in a real headless browser (selenium drives them).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
# Kerberos for the GSSAPI tests (compat-tests/test_gssapi.py): a KDC and its admin tools (k5test builds a
# throwaway realm with krb5kdc, kdb5_util and kadmin.local), kinit, the headers python-gssapi builds against,
# and Cyrus SASL's GSSAPI plugin, which Debian's librdkafka (kcat) authenticates with.
command -v krb5kdc >/dev/null 2>&1 || [ -x /usr/sbin/krb5kdc ] || missing+=(krb5-kdc)
[ -x /usr/sbin/kadmin.local ] || missing+=(krb5-admin-server)
command -v kinit >/dev/null 2>&1 || missing+=(krb5-user)
command -v krb5-config >/dev/null 2>&1 || missing+=(libkrb5-dev)
ls /usr/lib/*/sasl2/libgssapiv2.so* >/dev/null 2>&1 || missing+=(libsasl2-modules-gssapi-mit)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

VENV="${KAFKACOMPAT_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  python3 -m venv "$VENV"
fi
echo "== installing kafkacompat with its test extras"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
# The broker's bytecode, written once: an editable install has none, and where PYTHONDONTWRITEBYTECODE
# is set (some CI images) every broker process the tests start would compile ~90 modules again.
"$VENV/bin/python" -m compileall -q kafkacompat

if [ ! -d compat-tests/js/node_modules/kafkajs ]; then
  echo "== installing kafkajs"
  (cd compat-tests/js && npm install --no-audit --no-fund --loglevel=error)
fi

echo "== running tests"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
