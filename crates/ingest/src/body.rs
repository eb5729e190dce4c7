//! The message body as JSON, read straight into the shapes the parser's rules look at.
//!
//! Nothing here decides whether a body is valid: every value is taken whatever its JSON
//! type, so a wrong type becomes a refusal with its field and rule in `message.rs`, never
//! a serde error. Object members are kept in key order with the last of repeated keys
//! winning, as `serde_json::Map` keeps them, so the first offending member named in a
//! refusal is the same one it names when the body is read as a `serde_json::Value`.
//! Strings are borrowed from the body unless they hold escapes. A metric's value is
//! read raw: a number keeps the text it was sent as ([`Scalar::Number`]), never rounded
//! through a double.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON scalar, or the kind of a compound value (whose contents the rules never read).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar<'a> {
    Null,
    Bool,
    Str(Cow<'a, str>),
    /// An integer that fits an `i64`.
    Int(i64),
    /// An integer above `i64::MAX`.
    BigUint(u64),
    Float(f64),
    /// A number as it was sent, valid JSON number text (a metric's value).
    Number(&'a str),
    Array,
    Object,
}

/// A member that holds an object of scalars (`metrics`, `tags`), or something else.
/// The values of `metrics` are read raw ([`Scalar::Number`] for a number).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Members<'a> {
    /// In key order, each key once (the last of repeated keys).
    Object(Vec<(Cow<'a, str>, Scalar<'a>)>),
    Other(Scalar<'a>),
}

/// The members of one reading object; `unknown` is its first unknown key in key order.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct RawReading<'a> {
    pub device_id: Option<Scalar<'a>>,
    pub event_id: Option<Scalar<'a>>,
    pub ts: Option<Scalar<'a>>,
    pub metrics: Option<Members<'a>>,
    pub tags: Option<Members<'a>>,
    pub unknown: Option<Cow<'a, str>>,
}

/// One element of a batch's `readings` array.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Element<'a> {
    Reading(RawReading<'a>),
    NotObject,
}

/// The `readings` member of a body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Readings<'a> {
    Array(Vec<Element<'a>>),
    Other,
}

/// A whole body: an object (one reading, or a batch when `readings` is present, with
/// `other` its first other key in key order), or not an object at all. The members of
/// the IoT front door's envelope (`payload`, `thing`, `client`, `principal`) are kept
/// apart in `envelope`: no reading has them, and only a message the IoT rule sent may.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per message body, on the stack; boxing would allocate per body"
)]
pub(crate) enum RawBody<'a> {
    Object {
        reading: RawReading<'a>,
        readings: Option<Readings<'a>>,
        other: Option<Cow<'a, str>>,
        envelope: Envelope<'a>,
    },
    NotObject,
}

/// The IoT front door's members of a body: what the rule's SELECT wrote (the published
/// bytes, base64-encoded, the thing its topic names, the MQTT client id of the
/// connection, and the principal it authenticated with). The payload is kept as the
/// value it is; `front_door` decodes it.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Envelope<'a> {
    pub payload: Option<Scalar<'a>>,
    pub thing: Option<Scalar<'a>>,
    pub client: Option<Scalar<'a>>,
    pub principal: Option<Scalar<'a>>,
}

impl Envelope<'_> {
    /// Whether the body has any member of an envelope.
    pub(crate) fn is_present(&self) -> bool {
        self.payload.is_some()
            || self.thing.is_some()
            || self.client.is_some()
            || self.principal.is_some()
    }
}

/// Reads `body`; the error is `serde_json`'s (the body is not JSON).
pub(crate) fn read(body: &str) -> Result<RawBody<'_>, serde_json::Error> {
    serde_json::from_str(body)
}

/// Keeps the smaller of two keys: the first in key order.
fn first_key<'a>(slot: &mut Option<Cow<'a, str>>, key: Cow<'a, str>) {
    if slot.as_ref().is_none_or(|k| key < *k) {
        *slot = Some(key);
    }
}

/// A value read whatever its JSON type: an object or an array may be read into something
/// of its own, and every other value (or an object or array left unread) is a [`Scalar`].
trait Shape<'de>: Sized {
    /// Any value that is not read as an object or an array.
    fn scalar(value: Scalar<'de>) -> Self;

    /// A JSON object; skipped unless the shape reads objects.
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Self::scalar(Scalar::Object))
    }

    /// A JSON array; skipped unless the shape reads arrays.
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::scalar(Scalar::Array))
    }
}

/// The one visitor of every [`Shape`]: it takes any JSON value.
struct ShapeVisitor<T>(PhantomData<T>);

impl<'de, T: Shape<'de>> Visitor<'de> for ShapeVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::scalar(Scalar::Null))
    }
    fn visit_none<E>(self) -> Result<T, E> {
        Ok(T::scalar(Scalar::Null))
    }
    fn visit_bool<E>(self, _: bool) -> Result<T, E> {
        Ok(T::scalar(Scalar::Bool))
    }
    fn visit_i64<E>(self, v: i64) -> Result<T, E> {
        Ok(T::scalar(Scalar::Int(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<T, E> {
        Ok(T::scalar(
            i64::try_from(v).map_or(Scalar::BigUint(v), Scalar::Int),
        ))
    }
    fn visit_f64<E>(self, v: f64) -> Result<T, E> {
        Ok(T::scalar(Scalar::Float(v)))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<T, E> {
        Ok(T::scalar(Scalar::Str(Cow::Borrowed(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<T, E> {
        Ok(T::scalar(Scalar::Str(Cow::Owned(v.to_owned()))))
    }
    fn visit_string<E>(self, v: String) -> Result<T, E> {
        Ok(T::scalar(Scalar::Str(Cow::Owned(v))))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
}

/// Implements `Deserialize` for a [`Shape`] through [`ShapeVisitor`].
macro_rules! deserialize_shape {
    ($($shape:ident),*) => {$(
        impl<'de> Deserialize<'de> for $shape<'de> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(ShapeVisitor(PhantomData))
            }
        }
    )*};
}

deserialize_shape!(Scalar, Members, Readings, Element, RawBody);

impl<'de> Shape<'de> for Scalar<'de> {
    fn scalar(value: Scalar<'de>) -> Self {
        value
    }
}

/// An object key, borrowed when it holds no escape.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Shape<'de> for Members<'de> {
    fn scalar(value: Scalar<'de>) -> Self {
        Members::Other(value)
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        members::<A, Scalar<'de>>(map).map(Members::Object)
    }
}

/// The `metrics` member: [`Members`] whose values are read raw ([`RawScalar`]).
struct Metrics<'a>(Members<'a>);

deserialize_shape!(Metrics);

impl<'de> Shape<'de> for Metrics<'de> {
    fn scalar(value: Scalar<'de>) -> Self {
        Metrics(Members::Other(value))
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        members::<A, RawScalar<'de>>(map).map(|m| Metrics(Members::Object(m)))
    }
}

/// A value read as the text it was sent as: a number is [`Scalar::Number`], anything
/// else the [`Scalar`] it is.
struct RawScalar<'a>(Scalar<'a>);

impl<'a> From<RawScalar<'a>> for Scalar<'a> {
    fn from(value: RawScalar<'a>) -> Self {
        value.0
    }
}

impl<'de> Deserialize<'de> for RawScalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <&'de RawValue>::deserialize(d)?.get();
        if text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
            return Ok(RawScalar(Scalar::Number(text)));
        }
        serde_json::from_str(text)
            .map(RawScalar)
            .map_err(D::Error::custom)
    }
}

/// An object's members, in key order, each key once (the last of repeated keys).
fn members<'de, A, V>(mut map: A) -> Result<Vec<(Cow<'de, str>, Scalar<'de>)>, A::Error>
where
    A: MapAccess<'de>,
    V: Deserialize<'de> + Into<Scalar<'de>>,
{
    // A vector sorted once rather than a map: an object of a few members is read per
    // reading, and a map's node is a larger allocation than the members.
    let mut members = Vec::new();
    while let Some((Key(name), value)) = map.next_entry::<Key<'de>, V>()? {
        members.push((name, value.into()));
    }
    // Latest first, then a stable sort by key: the first of each run of equal keys is
    // the last one sent, and it is the one kept.
    members.reverse();
    members.sort_by(|a, b| a.0.cmp(&b.0));
    members.dedup_by(|sent_before, kept| sent_before.0 == kept.0);
    Ok(members)
}

impl<'de> Shape<'de> for Readings<'de> {
    fn scalar(_: Scalar<'de>) -> Self {
        Readings::Other
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(element) = seq.next_element::<Element<'de>>()? {
            list.push(element);
        }
        Ok(Readings::Array(list))
    }
}

impl<'de> Shape<'de> for Element<'de> {
    fn scalar(_: Scalar<'de>) -> Self {
        Element::NotObject
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut reading = RawReading::default();
        read_reading(map, &mut reading, None, &mut None)?;
        Ok(Element::Reading(reading))
    }
}

impl<'de> Shape<'de> for RawBody<'de> {
    fn scalar(_: Scalar<'de>) -> Self {
        RawBody::NotObject
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let mut reading = RawReading::default();
        let mut top = Top::default();
        let mut other = None;
        read_reading(map, &mut reading, Some(&mut top), &mut other)?;
        Ok(RawBody::Object {
            reading,
            readings: top.readings,
            other,
            envelope: top.envelope,
        })
    }
}

/// The members only a body's top level reads: the batch, and the envelope's.
#[derive(Default)]
struct Top<'a> {
    readings: Option<Readings<'a>>,
    envelope: Envelope<'a>,
}

/// Reads one object's members into `reading`. With `top` (the body's top level), a
/// `readings` member is the batch, the envelope's members are the envelope's, and
/// `other` is set to the first other key in key order; without it (inside a batch),
/// they are unknown members like any other.
fn read_reading<'de, A: MapAccess<'de>>(
    mut map: A,
    reading: &mut RawReading<'de>,
    mut top: Option<&mut Top<'de>>,
    other: &mut Option<Cow<'de, str>>,
) -> Result<(), A::Error> {
    while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
        match (key.as_ref(), top.as_deref_mut()) {
            ("device_id", _) => reading.device_id = Some(map.next_value()?),
            ("event_id", _) => reading.event_id = Some(map.next_value()?),
            ("ts", _) => reading.ts = Some(map.next_value()?),
            ("metrics", _) => reading.metrics = Some(map.next_value::<Metrics<'de>>()?.0),
            ("tags", _) => reading.tags = Some(map.next_value()?),
            ("readings", Some(top)) => {
                top.readings = Some(map.next_value()?);
                continue;
            }
            ("payload", Some(top)) => {
                top.envelope.payload = Some(map.next_value()?);
                continue;
            }
            ("thing", Some(top)) => {
                top.envelope.thing = Some(map.next_value()?);
                continue;
            }
            ("client", Some(top)) => {
                top.envelope.client = Some(map.next_value()?);
                continue;
            }
            ("principal", Some(top)) => {
                top.envelope.principal = Some(map.next_value()?);
                continue;
            }
            _ => {
                map.next_value::<IgnoredAny>()?;
                first_key(&mut reading.unknown, key.clone());
            }
        }
        // Every key but the batch's `readings` and the envelope's is "another key" of a
        // batch.
        first_key(other, key);
    }
    Ok(())
}
