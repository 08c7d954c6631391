"""IANA's IPv4 and IPv6 Special-Purpose Address Registries (last updated 2025-10-09) written out apart from
libs.address_registries, each block with the verdict its columns give; tests/libs/test_egress_registries.py probes the
guard with them and tests/libs/test_address_registries.py holds the module to them."""

from __future__ import annotations

PUBLIC, REFUSED, CARRIED = "public", "refused", "carried"

IPV4_SPECIAL = {
    "0.0.0.0/8": REFUSED,  # "This network", RFC 791
    "0.0.0.0/32": REFUSED,  # "This host on this network", RFC 1122
    "10.0.0.0/8": REFUSED,  # Private-Use, RFC 1918
    "100.64.0.0/10": REFUSED,  # Shared Address Space, RFC 6598 (Alibaba Cloud's metadata, Tailscale, CNIs)
    "127.0.0.0/8": REFUSED,  # Loopback
    "169.254.0.0/16": REFUSED,  # Link Local (the usual cloud metadata)
    "172.16.0.0/12": REFUSED,  # Private-Use
    "192.0.0.0/24": REFUSED,  # IETF Protocol Assignments, RFC 6890 (Oracle Cloud's metadata at .192)
    "192.0.0.0/29": REFUSED,  # IPv4 Service Continuity Prefix, RFC 7335
    "192.0.0.8/32": REFUSED,  # IPv4 dummy address, RFC 7600
    "192.0.0.9/32": PUBLIC,  # Port Control Protocol Anycast, RFC 7723
    "192.0.0.10/32": PUBLIC,  # TURN Anycast, RFC 8155
    "192.0.0.170/32": REFUSED,  # NAT64/DNS64 Discovery, RFC 8880
    "192.0.0.171/32": REFUSED,
    "192.0.2.0/24": REFUSED,  # TEST-NET-1
    "192.31.196.0/24": PUBLIC,  # AS112-v4, RFC 7535
    "192.52.193.0/24": PUBLIC,  # AMT, RFC 7450
    "192.88.99.0/24": REFUSED,  # Deprecated (6to4 Relay Anycast), terminated 2015-03
    "192.88.99.2/32": REFUSED,  # 6a44-relay anycast address, RFC 6751
    "192.168.0.0/16": REFUSED,  # Private-Use
    "192.175.48.0/24": PUBLIC,  # Direct Delegation AS112 Service, RFC 7534
    "198.18.0.0/15": REFUSED,  # Benchmarking, RFC 2544
    "198.51.100.0/24": REFUSED,  # TEST-NET-2
    "203.0.113.0/24": REFUSED,  # TEST-NET-3
    "240.0.0.0/4": REFUSED,  # Reserved, RFC 1112
    "255.255.255.255/32": REFUSED,  # Limited Broadcast
}

IPV6_SPECIAL = {
    "::1/128": REFUSED,  # Loopback Address
    "::/128": REFUSED,  # Unspecified Address
    "::ffff:0:0/96": REFUSED,  # IPv4-mapped Address
    "64:ff9b::/96": CARRIED,  # IPv4-IPv6 Translat., RFC 6052: True/True, and the IPv4 address inside decides
    "64:ff9b:1::/48": REFUSED,  # IPv4-IPv6 Translat., RFC 8215 (local use)
    "100::/64": REFUSED,  # Discard-Only Address Block, RFC 6666
    "100:0:0:1::/64": REFUSED,  # Dummy IPv6 Prefix, RFC 9780
    "2001::/23": REFUSED,  # IETF Protocol Assignments, RFC 2928
    "2001::/32": CARRIED,  # TEREDO, RFC 4380: N/A
    "2001:1::1/128": PUBLIC,  # Port Control Protocol Anycast
    "2001:1::2/128": PUBLIC,  # TURN Anycast
    "2001:1::3/128": PUBLIC,  # DNS-SD Service Registration Protocol Anycast, RFC 9665
    "2001:2::/48": REFUSED,  # Benchmarking, RFC 5180
    "2001:3::/32": PUBLIC,  # AMT
    "2001:4:112::/48": PUBLIC,  # AS112-v6
    "2001:10::/28": REFUSED,  # Deprecated (previously ORCHID), terminated 2014-03
    "2001:20::/28": PUBLIC,  # ORCHIDv2, RFC 7343
    "2001:30::/28": PUBLIC,  # Drone Remote ID Protocol Entity Tags, RFC 9374
    "2001:db8::/32": REFUSED,  # Documentation
    "2002::/16": CARRIED,  # 6to4, RFC 3056: N/A
    "2620:4f:8000::/48": PUBLIC,  # Direct Delegation AS112 Service
    "3fff::/20": REFUSED,  # Documentation, RFC 9637
    "5f00::/16": REFUSED,  # Segment Routing (SRv6) SIDs, RFC 9602
    "fc00::/7": REFUSED,  # Unique-Local
    "fe80::/10": REFUSED,  # Link-Local Unicast
}

NOT_INTERNET_UNICAST = {
    "224.0.0.0/4": REFUSED,  # IPv4 multicast, RFC 5771
    # the IPv6 Address Space registry, but 2000::/3 (Global Unicast)
    **dict.fromkeys(
        ["::/8", "100::/8", "200::/7", "400::/6", "800::/5", "1000::/4", "4000::/3", "6000::/3", "8000::/3"],
        REFUSED,
    ),
    **dict.fromkeys(["a000::/3", "c000::/3", "e000::/4", "f000::/5", "f800::/6", "fe00::/9"], REFUSED),
    "fc00::/7": REFUSED,  # Unique Local Unicast
    "fe80::/10": REFUSED,  # Link-Scoped Unicast
    "fec0::/10": REFUSED,  # site-local, deprecated by RFC 3879
    "ff00::/8": REFUSED,  # multicast
}

TEREDO_OF_10_0_0_1 = "2001:0:4136:e378:8000:63bf:f5ff:fffe"
