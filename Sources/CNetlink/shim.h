// Linux rtnetlink for the telemetry connectivity monitor. Swift's Glibc module has no netlink headers.
#ifndef VAULT_CNETLINK_SHIM_H
#define VAULT_CNETLINK_SHIM_H

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

// An eventfd that wakes the monitor's reader when it must stop (close() does not wake a blocked recv).
static inline int vault_eventfd(void) { return eventfd(0, EFD_CLOEXEC); }

// The groups a connectivity monitor listens to: links, IPv4/IPv6 addresses and routes.
static inline unsigned int vault_rtnetlink_groups(void) {
  return RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE;
}

#endif
