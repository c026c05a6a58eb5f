//! Drawing on the sheet's one A4 page: the three built-in fonts, text measured with their
//! own glyph advances, paragraphs wrapped to a width, boxes and rules. Coordinates are
//! points from the page's top left corner; a text's `y` is its baseline.

use krilla::color::luma;
use krilla::geom::{PathBuilder, Point, Rect};
use krilla::paint::{Fill, Stroke};
use krilla::surface::Surface;
use krilla::text::{Font, TextDirection};

use super::SheetError;

/// DejaVu Sans 2.37 (licence in `agentctl/fonts/LICENSE.txt`).
const SANS: &[u8] = include_bytes!("../../../fonts/DejaVuSans.ttf");
/// DejaVu Sans Bold 2.37.
const SANS_BOLD: &[u8] = include_bytes!("../../../fonts/DejaVuSans-Bold.ttf");
/// DejaVu Sans Mono 2.37.
const MONO: &[u8] = include_bytes!("../../../fonts/DejaVuSansMono.ttf");

/// The A4 page, in points.
pub(super) const PAGE_WIDTH: f32 = 595.28;
pub(super) const PAGE_HEIGHT: f32 = 841.89;

/// Which font a text is set in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    Regular,
    Bold,
    Mono,
}

/// One font: krilla's handle to draw with and ttf-parser's to measure with.
struct Face {
    font: Font,
    metrics: ttf_parser::Face<'static>,
    units_per_em: f32,
}

impl Face {
    fn load(bytes: &'static [u8], name: &'static str) -> Result<Self, SheetError> {
        let font = Font::new(bytes.into(), 0).ok_or(SheetError::Font { name })?;
        let metrics = ttf_parser::Face::parse(bytes, 0).map_err(|_| SheetError::Font { name })?;
        let units_per_em = f32::from(metrics.units_per_em());
        Ok(Self {
            font,
            metrics,
            units_per_em,
        })
    }

    fn advance(&self, c: char) -> f32 {
        let glyph = self
            .metrics
            .glyph_index(c)
            .or_else(|| self.metrics.glyph_index('?'));
        let units = glyph
            .and_then(|g| self.metrics.glyph_hor_advance(g))
            .unwrap_or(0);
        f32::from(units) / self.units_per_em
    }
}

/// The built-in fonts.
pub(super) struct Fonts {
    regular: Face,
    bold: Face,
    mono: Face,
}

impl Fonts {
    pub(super) fn load() -> Result<Self, SheetError> {
        Ok(Self {
            regular: Face::load(SANS, "DejaVu Sans")?,
            bold: Face::load(SANS_BOLD, "DejaVu Sans Bold")?,
            mono: Face::load(MONO, "DejaVu Sans Mono")?,
        })
    }

    fn face(&self, style: Style) -> &Face {
        match style {
            Style::Regular => &self.regular,
            Style::Bold => &self.bold,
            Style::Mono => &self.mono,
        }
    }

    /// How wide `text` is in `style` at `size` points.
    pub(super) fn width(&self, style: Style, size: f32, text: &str) -> f32 {
        let face = self.face(style);
        text.chars().map(|c| face.advance(c)).sum::<f32>() * size
    }

    /// `text` broken into lines no wider than `width`: at spaces, and inside a word only
    /// when the word alone is wider. The lines borrow from `text`.
    pub(super) fn wrap<'t>(
        &self,
        style: Style,
        size: f32,
        width: f32,
        text: &'t str,
    ) -> Vec<&'t str> {
        let mut lines = Vec::new();
        for paragraph in text.split('\n') {
            let mut start = 0;
            // Where the line may break: (its end, where the next line starts). A line breaks
            // at a space, or after a `:`, so a fingerprint breaks between its bytes.
            let mut room: Option<(usize, usize)> = None;
            let mut line_width = 0.0;
            let mut index = 0;
            let face = self.face(style);
            let chars: Vec<(usize, char)> = paragraph.char_indices().collect();
            while index < chars.len() {
                let (at, c) = chars[index];
                let advance = face.advance(c) * size;
                if line_width + advance > width && at > start {
                    // Break at the last place the line may break, else here.
                    let (end, next) = room.filter(|(end, _)| *end > start).unwrap_or((at, at));
                    lines.push(paragraph[start..end].trim_end());
                    start = next;
                    room = None;
                    line_width = self.width(style, size, &paragraph[start..at]);
                    continue;
                }
                match c {
                    ' ' => room = Some((at, at + 1)),
                    ':' => room = Some((at + 1, at + 1)),
                    _ => {}
                }
                line_width += advance;
                index += 1;
            }
            lines.push(paragraph[start..].trim_end());
        }
        lines
    }
}

/// Draws on the page's surface, `scale` times larger than the coordinates it is given: the
/// page is laid out on a smaller page of the same proportions (`PAGE_WIDTH / scale` wide),
/// so a sheet with little on it fills its page in larger type rather than leave the bottom
/// empty.
pub(super) struct Pen<'s, 'p> {
    surface: &'s mut Surface<'p>,
    fonts: &'s Fonts,
    scale: f32,
}

impl<'s, 'p> Pen<'s, 'p> {
    /// A pen whose coordinates are `scale` times smaller than the page's points; the
    /// caller has pushed the matching transform on `surface`.
    pub(super) fn new(surface: &'s mut Surface<'p>, fonts: &'s Fonts, scale: f32) -> Self {
        Self {
            surface,
            fonts,
            scale,
        }
    }

    /// The page's width in this pen's coordinates.
    pub(super) fn page_width(&self) -> f32 {
        PAGE_WIDTH / self.scale
    }

    /// The page's height in this pen's coordinates.
    pub(super) fn page_height(&self) -> f32 {
        PAGE_HEIGHT / self.scale
    }

    pub(super) fn fonts(&self) -> &'s Fonts {
        self.fonts
    }

    /// One line of text, its baseline at `y`, in gray `lightness` (0 is black).
    pub(super) fn text(&mut self, style: Style, size: f32, x: f32, y: f32, text: &str) {
        self.gray_text(style, size, x, y, 0, text);
    }

    pub(super) fn gray_text(
        &mut self,
        style: Style,
        size: f32,
        x: f32,
        y: f32,
        lightness: u8,
        text: &str,
    ) {
        if text.is_empty() {
            return;
        }
        self.surface.set_stroke(None);
        self.surface.set_fill(Some(Fill {
            paint: luma::Color::new(lightness).into(),
            ..Fill::default()
        }));
        self.surface.draw_text(
            Point::from_xy(x, y),
            self.fonts.face(style).font.clone(),
            size,
            text,
            false,
            TextDirection::Auto,
        );
    }

    /// `text` wrapped to `width` from the top `y`, lines `leading` apart; returns the
    /// `y` below the last line.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn paragraph(
        &mut self,
        style: Style,
        size: f32,
        leading: f32,
        x: f32,
        y: f32,
        width: f32,
        text: &str,
    ) -> f32 {
        let mut y = y;
        let fonts = self.fonts;
        for line in fonts.wrap(style, size, width, text) {
            y += leading;
            self.text(
                style,
                size,
                x,
                y - (leading - size) / 2.0 - size * 0.2,
                line,
            );
        }
        y
    }

    /// A rectangle outlined `line` points wide (none when 0) and filled in gray
    /// `fill` when given.
    pub(super) fn rect(&mut self, x: f32, y: f32, w: f32, h: f32, line: f32, fill: Option<u8>) {
        let Some(rect) = Rect::from_xywh(x, y, w, h) else {
            return;
        };
        let mut builder = PathBuilder::new();
        builder.push_rect(rect);
        let Some(path) = builder.finish() else {
            return;
        };
        self.surface.set_fill(fill.map(|lightness| Fill {
            paint: luma::Color::new(lightness).into(),
            ..Fill::default()
        }));
        self.surface.set_stroke((line > 0.0).then(|| Stroke {
            paint: luma::Color::black().into(),
            width: line,
            ..Stroke::default()
        }));
        self.surface.draw_path(&path);
        self.surface.set_stroke(None);
    }

    /// A horizontal rule from `x1` to `x2` at `y`.
    pub(super) fn rule(&mut self, x1: f32, x2: f32, y: f32, line: f32, lightness: u8) {
        let mut builder = PathBuilder::new();
        builder.move_to(x1, y);
        builder.line_to(x2, y);
        let Some(path) = builder.finish() else {
            return;
        };
        self.surface.set_fill(None);
        self.surface.set_stroke(Some(Stroke {
            paint: luma::Color::new(lightness).into(),
            width: line,
            ..Stroke::default()
        }));
        self.surface.draw_path(&path);
        self.surface.set_stroke(None);
    }
}

/// How far a command's line is indented under its prose.
const COMMAND_INDENT: f32 = 12.0;

/// `text`'s lines as they are set, each with its style and indent: a line of `text` that
/// starts with `$ ` is a command to type, set in the monospaced font and indented (never in
/// quotes or backticks, which a reader would type too); the others are prose in `style`,
/// wrapped to `width`.
pub(super) fn set_lines<'t>(
    fonts: &Fonts,
    (style, size): (Style, f32),
    width: f32,
    text: &'t str,
) -> Vec<(Style, f32, &'t str)> {
    let mut lines = Vec::new();
    for part in text.split('\n') {
        let (style, indent) = if part.starts_with("$ ") {
            (Style::Mono, COMMAND_INDENT)
        } else {
            (style, 0.0)
        };
        for line in fonts.wrap(style, size, width - indent, part) {
            lines.push((style, indent, line));
        }
    }
    lines
}

/// Draws `text` as [`set_lines`] sets it from the top `y`, lines `leading` apart; returns
/// the `y` below the last line.
#[allow(clippy::too_many_arguments)]
pub(super) fn prose(
    pen: &mut Pen<'_, '_>,
    (style, size): (Style, f32),
    leading: f32,
    x: f32,
    y: f32,
    width: f32,
    text: &str,
) -> f32 {
    let mut y = y;
    let fonts = pen.fonts();
    for (style, indent, line) in set_lines(fonts, (style, size), width, text) {
        y += leading;
        pen.text(
            style,
            size,
            x + indent,
            y - (leading - size) / 2.0 - size * 0.2,
            line,
        );
    }
    y
}
