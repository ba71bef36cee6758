#ifndef SLUICE_LINUX_SHIM_H
#define SLUICE_LINUX_SHIM_H

/* Linux interfaces that Glibc's Swift module leaves out. */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>

#endif
