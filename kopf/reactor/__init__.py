"""The machinery: registries of handlers, cause detection, lifecycles, invocation, and the handling cycle."""
