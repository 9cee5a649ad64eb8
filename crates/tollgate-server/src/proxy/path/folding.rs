//! Which non-ASCII characters some server reads as ASCII, so that a path a route does not match
//! could still reach the route's path upstream.
//!
//! Three kinds of server folding are modelled, each on one character at a time:
//!
//! - **compatibility normalization** (NFKC, as Unicode-normalizing frameworks, Python's
//!   `unicodedata` and IDNA apply it): fullwidth `ｍ` becomes `m`, the long s `ſ` becomes `s`, the
//!   ligature `ﬁ` becomes `fi`, the Kelvin sign becomes `K`, `／` becomes `/`;
//! - **simple case mapping** (Java's `equalsIgnoreCase`, .NET under a Turkish culture): the
//!   two letters whose single-character case mapping is ASCII but whose NFKC form is not, dotless
//!   `ı` (upper case `I`) and dotted `İ` (lower case `i`). The test
//!   `every_case_mapping_onto_ascii_is_known` proves no other character maps onto ASCII;
//! - **dropping default-ignorable code points** (U+200B zero-width space, U+00AD soft hyphen,
//!   U+FEFF, variation selectors, ...), which NFKC_Casefold and many text pipelines remove.
//!
//! A route's prefix is ASCII in practice and matches whole segments, so a segment can only land
//! on it if the whole segment folds to ASCII. Such a segment is refused, and a segment that
//! keeps a non-ASCII character after folding (`café`, `東京（駅）`, a Persian word with a
//! zero-width non-joiner, an emoji with a variation selector) is kept: no server model here turns
//! it into an ASCII name. Characters that fold to ASCII with a meaning in a path (`／` to `/`,
//! `．` to `.`, `：` to `:`, `％` to `%`, ...) are refused wherever they are, since they change
//! where a folding server splits or decodes the path.
//!
//! The Unicode tables are ICU4X's (`icu_normalizer`, `icu_properties`), which the Redis client
//! already links for IDNA: no second copy of the data in the binary. Only segments with a
//! non-ASCII character come here.

use icu_normalizer::ComposingNormalizerBorrowed;
use icu_properties::props::DefaultIgnorableCodePoint;
use icu_properties::{CodePointSetData, CodePointSetDataBorrowed};

use super::PathError;

const NFKC: ComposingNormalizerBorrowed<'static> = ComposingNormalizerBorrowed::new_nfkc();
const IGNORABLE: CodePointSetDataBorrowed<'static> = CodePointSetData::new::<DefaultIgnorableCodePoint>();

/// Refuses `segment` (decoded, UTF-8) when a folding server would read it as an ASCII name, or
/// when one of its characters folds to an ASCII character with a meaning in a path.
pub(super) fn check(segment: &str) -> Result<(), PathError> {
    // Some non-ASCII character survives every folding: the segment cannot be an ASCII name.
    let mut keeps_non_ascii = false;
    let mut folds: Option<PathError> = None;
    for found in segment.chars().filter(|c| !c.is_ascii()) {
        if IGNORABLE.contains(found) {
            folds.get_or_insert(PathError::Invisible(found));
            continue;
        }
        let mut utf8 = [0; 4];
        let nfkc = NFKC.normalize(found.encode_utf8(&mut utf8));
        let reads_as = match found {
            '\u{131}' => "I",
            '\u{130}' => "i",
            _ => &nfkc,
        };
        let refusal = || PathError::FoldsToAscii {
            found,
            reads_as: reads_as.to_owned(),
        };
        // `／`, or `℅` (`c/o`), splits the path for a folding server even beside text that keeps
        // a non-ASCII character.
        if reads_as.chars().any(means_something) {
            return Err(refusal());
        }
        if reads_as.is_ascii() {
            folds.get_or_insert_with(refusal);
        } else {
            keeps_non_ascii = true;
        }
    }
    match folds {
        Some(refusal) if !keeps_non_ascii => Err(refusal),
        _ => Ok(()),
    }
}

/// ASCII characters with a meaning in a path: separators, the dot of dot segments and trailing
/// dots, `;` parameters, `:` data streams, escapes, and the start of a query or fragment.
fn means_something(c: char) -> bool {
    matches!(c, '/' | '\\' | '.' | ';' | ':' | '%' | '?' | '#')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_ascii(mut mapped: impl Iterator<Item = char>) -> bool {
        matches!((mapped.next(), mapped.next()), (Some(c), None) if c.is_ascii())
    }

    #[test]
    fn every_case_mapping_onto_ascii_is_known() {
        // Every character outside ASCII whose upper or lower case is one ASCII character must be
        // refused on its own; std's tables are the full mappings, which hold the simple ones
        // whenever they are one character long.
        let mut onto_ascii = Vec::new();
        for found in '\u{80}'..=char::MAX {
            if one_ascii(found.to_uppercase()) || one_ascii(found.to_lowercase()) {
                onto_ascii.push(found);
                assert!(
                    matches!(check(&found.to_string()), Err(PathError::FoldsToAscii { .. })),
                    "U+{:04X}",
                    u32::from(found)
                );
            }
        }
        // ı, ſ and the Kelvin sign; İ lower-cases to `i` and a combining dot, refused by name.
        assert_eq!(onto_ascii, ['\u{131}', '\u{17f}', '\u{212a}']);
        assert!(check("\u{130}").is_err());
    }

    #[test]
    fn text_that_keeps_a_non_ascii_character_is_kept() {
        for segment in [
            "caf\u{e9}",
            "cafe\u{301}",
            "stra\u{df}e",
            "\u{131}\u{15f}\u{131}k",
            "東京（駅）",
            "ＰＣ検索",
            "\u{645}\u{6cc}\u{200c}\u{62e}\u{648}\u{627}\u{647}\u{645}",
            "\u{2764}\u{fe0f}",
            "\u{1f468}\u{200d}\u{1f469}",
            "\u{bd}",
        ] {
            assert_eq!(check(segment), Ok(()), "{segment}");
        }
    }
}
