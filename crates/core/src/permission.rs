//! Access permissions a user or API token holds when authentication is on
//! (`tsd.core.authentication.enable`).
//!
//! The vocabulary is part of the operator contract: the credentials file and
//! `tsdb auth --permissions P[,P...]` spell permissions as `read`, `write`, `annotate`, `uid`,
//! `delete` and `admin`, and `admin` implies every other one.

use std::fmt;

/// One permission, as named in the credentials file and on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    /// Queries, suggest, search, lookups, meta reads, the UI and `/q`.
    Read,
    /// Data points: telnet `put`, `/api/put`, rollups, histograms.
    Write,
    /// Annotation writes.
    Annotate,
    /// UID assignment and renames, UID and TS meta writes.
    Uid,
    /// Query deletes, annotation and UID deletes.
    Delete,
    /// Caches, configuration, statistics, shutdown, logs; implies every other permission.
    Admin,
}

impl Permission {
    /// Every permission, in the order they are printed.
    pub const ALL: [Permission; 6] = [
        Permission::Read,
        Permission::Write,
        Permission::Annotate,
        Permission::Uid,
        Permission::Delete,
        Permission::Admin,
    ];

    /// The name used in the credentials file and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Annotate => "annotate",
            Permission::Uid => "uid",
            Permission::Delete => "delete",
            Permission::Admin => "admin",
        }
    }

    /// Parses one permission name (exact, lower case).
    pub fn parse(name: &str) -> Result<Permission, UnknownPermission> {
        Permission::ALL
            .into_iter()
            .find(|permission| permission.name() == name)
            .ok_or_else(|| UnknownPermission(name.to_owned()))
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A permission name that is not one of [`Permission::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPermission(pub String);

impl fmt::Display for UnknownPermission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown permission {:?} (expected read, write, annotate, uid, delete or admin)",
            self.0
        )
    }
}

impl std::error::Error for UnknownPermission {}

/// The set of permissions one user or token holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Permissions(u8);

impl Permissions {
    /// No permission at all.
    pub const NONE: Permissions = Permissions(0);

    /// Parses a comma-separated list (`read,write`); spaces around names are ignored.
    /// An empty list or an unknown name is an error.
    pub fn parse_list(list: &str) -> Result<Permissions, UnknownPermission> {
        let mut permissions = Permissions::NONE;
        for name in list.split(',').map(str::trim) {
            permissions = permissions.with(Permission::parse(name)?);
        }
        Ok(permissions)
    }

    /// This set plus `permission`.
    pub fn with(self, permission: Permission) -> Permissions {
        Permissions(self.0 | permission.bit())
    }

    /// Whether this set grants `permission`; `admin` grants every permission.
    pub fn allows(self, permission: Permission) -> bool {
        self.0 & (permission.bit() | Permission::Admin.bit()) != 0
    }

    /// The permissions named in this set (not those `admin` implies), in [`Permission::ALL`]'s
    /// order.
    pub fn iter(self) -> impl Iterator<Item = Permission> {
        Permission::ALL
            .into_iter()
            .filter(move |permission| self.0 & permission.bit() != 0)
    }
}

impl fmt::Display for Permissions {
    /// The comma-separated form [`Permissions::parse_list`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, permission) in self.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            f.write_str(permission.name())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips() {
        for permission in Permission::ALL {
            assert_eq!(Permission::parse(permission.name()), Ok(permission));
        }
    }

    #[test]
    fn a_list_grants_only_what_it_names() {
        let permissions = Permissions::parse_list("read, write").unwrap();
        assert!(permissions.allows(Permission::Read));
        assert!(permissions.allows(Permission::Write));
        for denied in [
            Permission::Annotate,
            Permission::Uid,
            Permission::Delete,
            Permission::Admin,
        ] {
            assert!(!permissions.allows(denied), "{denied} granted");
        }
        assert_eq!(permissions.to_string(), "read,write");
    }

    #[test]
    fn admin_implies_every_permission() {
        let admin = Permissions::parse_list("admin").unwrap();
        for permission in Permission::ALL {
            assert!(admin.allows(permission), "admin lacks {permission}");
        }
        assert_eq!(admin.to_string(), "admin");
    }

    #[test]
    fn unknown_and_empty_names_are_refused() {
        let error = Permissions::parse_list("read,root").unwrap_err();
        assert_eq!(error, UnknownPermission("root".to_owned()));
        assert!(error.to_string().contains("unknown permission \"root\""));
        assert!(Permissions::parse_list("").is_err());
        assert!(Permissions::parse_list("read,").is_err());
        assert!(Permission::parse("Read").is_err());
    }

    #[test]
    fn no_permissions_allow_nothing() {
        for permission in Permission::ALL {
            assert!(!Permissions::NONE.allows(permission));
        }
    }
}
