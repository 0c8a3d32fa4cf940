//! The value of a point as the read and query paths carry it: [`Num`] (as stored, integers
//! kept) and [`Sample`] (what a reader may ask for: stored values or doubles).

/// A value as stored: integer math is kept where OpenTSDB keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    /// The value as a double (integers converted).
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

/// A point's value as a query reads it: as stored ([`Num`], integers kept), or as a double
/// (all that downsampling needs).
pub trait Sample: Copy + Send + Sync + std::fmt::Debug + 'static {
    fn from_int(i: i64) -> Self;
    fn from_float(f: f64) -> Self;
    fn as_f64(self) -> f64;
    /// The integer, when the value is one (integer math is kept between two integers).
    fn as_int(self) -> Option<i64>;
    fn to_num(self) -> Num;
}

impl Sample for Num {
    #[inline(always)]
    fn from_int(i: i64) -> Num {
        Num::Int(i)
    }
    #[inline(always)]
    fn from_float(f: f64) -> Num {
        Num::Float(f)
    }
    #[inline(always)]
    fn as_f64(self) -> f64 {
        Num::as_f64(self)
    }
    #[inline(always)]
    fn as_int(self) -> Option<i64> {
        match self {
            Num::Int(i) => Some(i),
            Num::Float(_) => None,
        }
    }
    #[inline(always)]
    fn to_num(self) -> Num {
        self
    }
}

impl Sample for f64 {
    #[inline(always)]
    fn from_int(i: i64) -> f64 {
        i as f64
    }
    #[inline(always)]
    fn from_float(f: f64) -> f64 {
        f
    }
    #[inline(always)]
    fn as_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn as_int(self) -> Option<i64> {
        None
    }
    #[inline(always)]
    fn to_num(self) -> Num {
        Num::Float(self)
    }
}
