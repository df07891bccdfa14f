"""A self-signed certificate for ``grpc-overhead service --tls``.

Generated at start with ``cryptography``: an EC P-256 key and a certificate for
CN=localhost with subjectAltName localhost, 127.0.0.1 and ::1 (plus the
``--host`` the server listens on when that is a specific name or address). The
certificate is its own CA (basicConstraints CA:TRUE), so a client trusts it by
passing the same file as its root: ``grpc-overhead load --tls-ca DIR/cert.pem``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

CERT_NAME = "cert.pem"
KEY_NAME = "key.pem"
_WILDCARD_HOSTS = {"", "0.0.0.0", "::", "[::]", "*"}


def write_self_signed(directory: Path | str, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """Write cert.pem and key.pem (mode 0600) into ``directory``; return their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    alt_names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    extra = host.strip("[]")
    if extra not in _WILDCARD_HOSTS and extra not in ("localhost", "127.0.0.1", "::1"):
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(extra)))
        except ValueError:
            alt_names.append(x509.DNSName(extra))
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / CERT_NAME
    key_path = directory / KEY_NAME
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path
