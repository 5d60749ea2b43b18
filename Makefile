# The install routes besides the Debian package (docs/install.md). Building is cargo's job;
# these call the scripts that lay the files out.
PREFIX ?= /usr/local
DESTDIR ?=
PROFILE ?= release

.PHONY: install uninstall deb
install:
	bash scripts/install.sh --prefix $(PREFIX) --profile $(PROFILE) $(if $(DESTDIR),--destdir $(DESTDIR))
uninstall:
	bash scripts/install.sh --uninstall --prefix $(PREFIX) $(if $(DESTDIR),--destdir $(DESTDIR))
deb:
	bash scripts/deb.sh --profile $(PROFILE)
