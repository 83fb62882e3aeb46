"""Control of a live proxy: the controller (control.controller), its HTTP API (control.api), who may
use it (control.access), the process actions' interface (control.server) and the ``ctl`` client."""
