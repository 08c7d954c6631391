"""Where brokers are and how the gateway reaches them: route cache, writes to every master, coalescing, long polls."""
