//! Lower-case hex, the one spelling of a digest the server writes: the decision log's keyed
//! hashes of keys and the admin API's cursors past a long entry. One encoder, so the two can
//! never spell the same bytes differently.

/// `bytes` in lower-case hex, two digits a byte.
///
/// Not a public item of the crate; its test is below.
pub(crate) fn lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
        hex.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spells_each_byte_as_two_lower_case_digits() {
        assert_eq!(lower(&[]), "");
        assert_eq!(lower(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
    }
}
