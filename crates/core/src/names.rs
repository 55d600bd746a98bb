//! Closed sets of names that users type or files carry (policies, heat
//! formats, engines, backends, ...): each set is written once, with
//! [`named!`](crate::named), which makes the enum, its names, parsing and
//! the list that help texts and errors show.

/// A closed set of names.
pub trait Named: Copy + Sized + Send + Sync + 'static {
    /// What a member is called in messages (`policy`, `heat format`).
    const WHAT: &'static str;
    fn all() -> &'static [Self];
    fn name(self) -> &'static str;

    /// The member called `name`, or an error that lists the names.
    fn parse(name: &str) -> Result<Self, String> {
        Self::all()
            .iter()
            .copied()
            .find(|v| v.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::all().iter().map(|v| v.name()).collect();
                format!(
                    "unknown {} `{name}`; one of {}",
                    Self::WHAT,
                    names.join(", ")
                )
            })
    }
}

/// `named! { /// docs  pub enum Backend("backend") { /// docs
/// Pread = "pread", ... } }`: the enum with `ALL` (in order), `name`,
/// `from_name`, `Display` (the name) and [`Named`]. A member is a plain
/// value, so the enum derives `Debug`, `Clone`, `Copy`, equality, `Hash`
/// and the order of `ALL`; a set written with attributes other than docs
/// (`#[derive(..)]`) gets those instead.
#[macro_export]
macro_rules! named {
    (
        $(#[doc = $doc:expr])*
        $vis:vis enum $Enum:ident($what:literal) {
            $( $(#[$vmeta:meta])* $Variant:ident = $name:literal ),+ $(,)?
        }
    ) => {
        $crate::named! {
            $(#[doc = $doc])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
            $vis enum $Enum($what) {
                $( $(#[$vmeta])* $Variant = $name ),+
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $Enum:ident($what:literal) {
            $( $(#[$vmeta:meta])* $Variant:ident = $name:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $Enum {
            $( $(#[$vmeta])* $Variant ),+
        }

        impl $Enum {
            pub const ALL: [$Enum; [$($name),+].len()] = [$($Enum::$Variant),+];

            pub fn name(self) -> &'static str {
                match self {
                    $( $Enum::$Variant => $name ),+
                }
            }

            pub fn from_name(name: &str) -> Option<$Enum> {
                Self::ALL.into_iter().find(|v| v.name() == name)
            }
        }

        impl $crate::names::Named for $Enum {
            const WHAT: &'static str = $what;

            fn all() -> &'static [Self] {
                &Self::ALL
            }

            fn name(self) -> &'static str {
                $Enum::name(self)
            }
        }

        impl ::std::fmt::Display for $Enum {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// The name of `known` nearest to `word` (fewest single-character edits;
/// the first of equals): what a message suggests for a misspelt name.
pub fn nearest<'a>(word: &str, known: &[&'a str]) -> &'a str {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut diagonal = row[0];
            row[0] = i + 1;
            for (j, &cb) in b.iter().enumerate() {
                let next = (diagonal + usize::from(ca != cb))
                    .min(row[j] + 1)
                    .min(row[j + 1] + 1);
                diagonal = row[j + 1];
                row[j + 1] = next;
            }
        }
        row[b.len()]
    };
    known
        .iter()
        .copied()
        .min_by_key(|k| distance(word, k))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::Named;

    crate::named! {
        /// A doc comment on the set is kept.
        enum Colour("colour") {
            /// A doc comment on a member is kept.
            Red = "red",
            DeepBlue = "deep-blue",
        }
    }

    #[test]
    fn the_nearest_name_is_the_fewest_edits_away() {
        // `bitz` is one substitution from `bits`, five edits from `group`.
        assert_eq!(super::nearest("bitz", &["bits", "group"]), "bits");
        // `grop` is one insertion from `group`, four edits from `bits`.
        assert_eq!(super::nearest("grop", &["bits", "group"]), "group");
    }

    #[test]
    fn names_parse_print_and_list_in_order() {
        // Expected values are the literals written above.
        assert_eq!(Colour::ALL, [Colour::Red, Colour::DeepBlue]);
        assert_eq!(Colour::DeepBlue.to_string(), "deep-blue");
        assert_eq!(Colour::from_name("red"), Some(Colour::Red));
        assert_eq!(Colour::from_name("Red"), None);
        assert_eq!(<Colour as Named>::parse("deep-blue"), Ok(Colour::DeepBlue));
        assert_eq!(
            <Colour as Named>::parse("green"),
            Err("unknown colour `green`; one of red, deep-blue".to_string())
        );
    }
}
