"""Cloud metadata services, by address and by name, with the rule that must refuse each: the
table the web ops (tests/web/test_guard_ops.py) and the browser proxy
(tests/browser/test_browser_metadata.py) are both held to."""

from __future__ import annotations

# Metadata services the major clouds document, each with the rule that must refuse it; the
# sources are cited at the deny-table row or blocked-name row that names them.
METADATA_ADDRESSES = [
    ("169.254.169.254", "ssrf_blocked:link-local-169.254/16"),  # AWS, Azure, GCE, OCI, DO...
    ("169.254.170.2", "ssrf_blocked:link-local-169.254/16"),  # AWS ECS task metadata
    ("169.254.170.23", "ssrf_blocked:link-local-169.254/16"),  # AWS EKS Pod Identity
    ("169.254.0.23", "ssrf_blocked:link-local-169.254/16"),  # Tencent
    ("169.254.42.42", "ssrf_blocked:link-local-169.254/16"),  # Scaleway
    ("168.63.129.16", "ssrf_blocked:azure-wireserver-168.63.129.16"),  # Azure WireServer
    ("100.100.100.200", "ssrf_blocked:cgnat-100.64/10"),  # Alibaba
    ("192.0.0.192", "ssrf_blocked:ietf-192.0.0/24"),  # Oracle's older endpoint
    ("[fd00:ec2::254]", "ssrf_blocked:ula-fc00::/7"),  # AWS IMDS over IPv6
    ("[fd00:ec2::23]", "ssrf_blocked:ula-fc00::/7"),  # AWS EKS Pod Identity over IPv6
    ("[fd20:ce::254]", "ssrf_blocked:ula-fc00::/7"),  # GCE metadata over IPv6
    ("[::ffff:a9fe:a9fe]", "ssrf_blocked:link-local-169.254/16-via-ipv4-mapped"),
    ("[64:ff9b::a83f:8110]", "ssrf_blocked:azure-wireserver-168.63.129.16-via-nat64"),
    ("[64:ff9b:1:a9fe:a9:fe00::]", "ssrf_blocked:link-local-169.254/16-via-nat64-local"),
]
METADATA_NAMES = [
    ("metadata.google.internal", "url_rejected:blocked-name-gce-metadata"),
    ("metadata.goog", "url_rejected:blocked-name-gce-metadata"),
    ("METADATA.GOOG.", "url_rejected:blocked-name-gce-metadata"),
    ("metadata", "url_rejected:blocked-name-gce-metadata"),
    ("instance-data", "url_rejected:blocked-name-aws-instance-data"),
    ("instance-data.ec2.internal", "url_rejected:blocked-name-aws-instance-data"),
    ("metadata.tencentyun.com", "url_rejected:blocked-name-tencent-metadata"),
    ("api.metadata.cloud.ibm.com", "url_rejected:blocked-name-ibm-metadata"),
    ("metadata.platformequinix.com", "url_rejected:blocked-name-equinix-metadata"),
    ("metadata.packet.net", "url_rejected:blocked-name-equinix-metadata"),
    ("kubernetes", "url_rejected:blocked-name-kubernetes"),
    ("kubernetes.default", "url_rejected:blocked-name-kubernetes"),
    ("kubernetes.default.svc", "url_rejected:blocked-name-kubernetes"),
    ("kubernetes.default.svc.cluster.local", "url_rejected:blocked-name-local"),
]
METADATA_TARGETS = METADATA_ADDRESSES + METADATA_NAMES
